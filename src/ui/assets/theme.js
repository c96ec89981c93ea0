// plangate dashboard: the colour theme. Loaded in <head> without `defer` so the
// chosen theme is on <html> before the first paint (no flash of the other one).
// prefers-color-scheme is the default; the header's toggle stores a choice in
// localStorage, which every tab of this site follows (the `storage` event).
"use strict";
(function () {
  var KEY = "plangate-theme";
  var root = document.documentElement;
  var dark = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function stored() {
    try {
      var v = window.localStorage.getItem(KEY);
      return v === "dark" || v === "light" ? v : null;
    } catch (e) {
      return null; // storage refused (privacy settings): the system's choice
    }
  }
  function effective() {
    return root.dataset.theme || (dark && dark.matches ? "dark" : "light");
  }
  function apply(theme) {
    if (theme) root.dataset.theme = theme;
    else delete root.dataset.theme;
    // The button says what it will do: the other theme.
    var button = document.getElementById("theme-toggle");
    if (button) button.textContent = effective() === "dark" ? "Light theme" : "Dark theme";
  }

  apply(stored());
  window.addEventListener("storage", function (e) {
    if (e.key === KEY || e.key === null) apply(stored());
  });
  if (dark && dark.addEventListener) dark.addEventListener("change", function () { apply(stored()); });
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    button.hidden = false;
    apply(stored());
    button.addEventListener("click", function () {
      var next = effective() === "dark" ? "light" : "dark";
      try { window.localStorage.setItem(KEY, next); } catch (e) { /* this page only */ }
      apply(next);
    });
  });
})();
