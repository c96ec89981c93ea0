// plangate dashboard: live updates over Server-Sent Events (plain EventSource).
// No inline scripts anywhere: this file is the only script (CSP script-src 'self').
"use strict";
(function () {
  var TERMINAL = { succeeded: true, failed: true, cancelled: true };

  // Replace an element's st-* class with st-<status>.
  function setStatusClass(el, status) {
    var classes = Array.prototype.slice.call(el.classList);
    for (var i = 0; i < classes.length; i++) {
      if (classes[i].indexOf("st-") === 0) el.classList.remove(classes[i]);
    }
    el.classList.add("st-" + status);
  }

  function label(status, category) {
    return category ? status + ": " + category : status;
  }

  // This page fetched again: its element `id` and ours, or null when either is
  // missing. The live parts of a page are re-read from the server this way.
  function refetch(id) {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
        var mine = document.getElementById(id);
        return fresh && mine ? { fresh: fresh, mine: mine } : null;
      });
  }

  // --- The DAG at real sizes. ---
  var scroller = document.getElementById("dag-scroll");
  var svg = scroller ? scroller.querySelector("svg.dag") : null;
  var activeWave = null;

  // Scroll the drawing (not the page) so the active wave is in view.
  function showActiveWave() {
    if (!scroller) return;
    var wave = scroller.querySelector("g.wave.active, g.wave-box.active");
    if (!wave) return;
    var box = wave.getBoundingClientRect();
    var view = scroller.getBoundingClientRect();
    if (box.left >= view.left && box.right <= view.right) return;
    scroller.scrollLeft += box.left - view.left - Math.max(0, (view.width - box.width) / 2);
  }

  // Name the waves outside the visible part of the drawing.
  function ranges(list) {
    if (list.length === 0) return "";
    var words = list.length === 1 ? "wave " + list[0] + " is" :
      "waves " + list[0] + "\u2013" + list[list.length - 1] + " are";
    return words;
  }
  function sayOffscreen() {
    var line = document.getElementById("dag-offscreen");
    if (!scroller || !line) return;
    var view = scroller.getBoundingClientRect();
    var left = [], right = [];
    scroller.querySelectorAll("g.wave[data-wave], g.wave-box[data-wave]").forEach(function (g) {
      var box = g.getBoundingClientRect();
      if (box.right <= view.left + 1) left.push(g.dataset.wave);
      else if (box.left >= view.right - 1) right.push(g.dataset.wave);
    });
    var parts = [];
    if (left.length) parts.push(ranges(left) + " to the left");
    if (right.length) parts.push(ranges(right) + " to the right");
    line.textContent = parts.length ? parts.join("; ") + ": scroll the graph to see them." : "";
  }

  // Hover or focus a node: its dependencies and dependents stand out, and
  // #dag-trace names them (for keyboard and screen-reader users too).
  if (svg) {
    var nodes = new Map(), from = new Map(), to = new Map();
    svg.querySelectorAll("g[data-i]").forEach(function (g) { nodes.set(g.dataset.i, g); });
    svg.querySelectorAll(".edges path[data-from]").forEach(function (p) {
      if (!from.has(p.dataset.from)) from.set(p.dataset.from, []);
      if (!to.has(p.dataset.to)) to.set(p.dataset.to, []);
      from.get(p.dataset.from).push(p);
      to.get(p.dataset.to).push(p);
    });
    var trace = document.getElementById("dag-trace");
    var idle = trace ? trace.textContent : "";
    var clear = function () {
      svg.classList.remove("tracing");
      svg.querySelectorAll(".hl, .hl-self, .hl-dep, .hl-needed").forEach(function (el) {
        el.classList.remove("hl", "hl-self", "hl-dep", "hl-needed");
      });
    };
    var names = function (list) {
      return list.length ? list.join(", ") : "nothing";
    };
    var highlight = function (g) {
      clear();
      var i = g.dataset.i;
      var deps = [], needed = [];
      svg.classList.add("tracing");
      g.classList.add("hl-self");
      (to.get(i) || []).forEach(function (p) {
        p.classList.add("hl");
        var d = nodes.get(p.dataset.from);
        if (d) { d.classList.add("hl-dep"); deps.push(d.dataset.task); }
      });
      (from.get(i) || []).forEach(function (p) {
        p.classList.add("hl");
        var n = nodes.get(p.dataset.to);
        if (n) { n.classList.add("hl-needed"); needed.push(n.dataset.task); }
      });
      if (trace) {
        trace.textContent = g.dataset.task + " depends on " + names(deps) + "; needed by " + names(needed);
      }
    };
    var target = function (e) {
      var el = e.target;
      if (el && el.closest) {
        var link = el.closest("a");
        return (link && link.querySelector("g[data-i]")) || el.closest("g[data-i]");
      }
      return null;
    };
    svg.addEventListener("mouseover", function (e) { var g = target(e); if (g) highlight(g); });
    svg.addEventListener("focusin", function (e) { var g = target(e); if (g) highlight(g); });
    svg.addEventListener("mouseleave", clear);
    svg.addEventListener("focusout", function (e) {
      if (!e.relatedTarget || !svg.contains(e.relatedTarget)) {
        clear();
        if (trace) trace.textContent = idle;
      }
    });
  }
  if (scroller) {
    showActiveWave();
    sayOffscreen();
    scroller.addEventListener("scroll", sayOffscreen, { passive: true });
    window.addEventListener("resize", sayOffscreen);
  }

  // --- Task list: nodes and rows carry data-task; statuses change live. ---
  var board = document.getElementById("task-list");
  if (board && board.dataset.events) {
    var index = new Map();
    var tagged = document.querySelectorAll("[data-task]");
    for (var i = 0; i < tagged.length; i++) {
      var key = tagged[i].dataset.task;
      if (!index.has(key)) index.set(key, []);
      index.get(key).push(tagged[i]);
    }
    // The wave cards' counts come from the server: re-read them after a change.
    var first = true;
    var pending = null;
    var refreshWaves = function () {
      if (pending) return;
      pending = setTimeout(function () {
        pending = null;
        refetch("waves")
          .then(function (found) { if (found) found.mine.replaceWith(found.fresh); })
          .catch(function () {});
      }, 500);
    };
    var tasks = new EventSource(board.dataset.events);
    tasks.addEventListener("tasks", function (e) {
      var msg = JSON.parse(e.data);
      msg.tasks.forEach(function (t) {
        var id = t[0], status = t[1], category = t[2];
        (index.get(id) || []).forEach(function (el) {
          el.dataset.status = status;
          setStatusClass(el, status);
          el.querySelectorAll(".status").forEach(function (s) { setStatusClass(s, status); });
          el.querySelectorAll(".st").forEach(function (s) { s.textContent = label(status, category); });
          var title = el.querySelector("title");
          if (title && el.dataset.base) {
            title.textContent = el.dataset.base + ": " + label(status, category) +
              (el.dataset.review ? ", review" : "");
          }
        });
      });
      var active = document.getElementById("active-wave");
      if (active) active.textContent = msg.wave === null ? "none (nothing left to do)" : String(msg.wave);
      document.querySelectorAll("svg.dag g.wave[data-wave], svg.dag g.wave-box[data-wave]").forEach(function (g) {
        var on = String(msg.wave) === g.dataset.wave;
        g.classList.toggle("active", on);
        var text = g.querySelector(".wave-label");
        if (text) text.textContent = "wave " + g.dataset.wave + (on ? " (active)" : "");
      });
      if (!first) refreshWaves();
      first = false;
      if (msg.wave !== activeWave) {
        activeWave = msg.wave;
        showActiveWave();
      }
      board.dataset.live = "1";
    });
  }

  // --- Job page: the API's own event stream (state, progress, log). ---
  var job = document.getElementById("job");
  if (job && job.dataset.events) {
    var rendered = Number(job.dataset.version || "0");
    var log = document.getElementById("log");
    var source = new EventSource(job.dataset.events);
    var refresh = function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.text(); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("job-details");
          var mine = document.getElementById("job-details");
          if (fresh && mine) mine.replaceWith(fresh);
        })
        .catch(function () {});
    };
    var fresher = null;
    var refreshSoon = function () {
      if (fresher) return;
      fresher = setTimeout(function () { fresher = null; refresh(); }, 300);
    };
    source.addEventListener("log", function (e) {
      if (Number(e.lastEventId) <= rendered) return;
      var data = JSON.parse(e.data);
      var li = document.createElement("li");
      if (data.at) {
        var at = document.createElement("time");
        at.className = "at";
        at.dateTime = data.at;
        at.title = data.at;
        // HH:MM:SS.mmm (UTC), as the server renders it.
        at.textContent = data.at.slice(11, 23);
        li.appendChild(at);
        li.appendChild(document.createTextNode(" "));
      }
      var line = document.createElement("span");
      line.className = "line";
      line.textContent = data.line;
      li.appendChild(line);
      log.appendChild(li);
    });
    source.addEventListener("progress", function (e) {
      if (Number(e.lastEventId) <= rendered) return;
      refreshSoon();
    });
    source.addEventListener("state", function (e) {
      if (Number(e.lastEventId) <= rendered) return;
      var data = JSON.parse(e.data);
      var state = document.getElementById("job-state");
      if (state) {
        state.textContent = "";
        var span = document.createElement("span");
        span.className = "status st-" + data.status;
        span.textContent = data.status;
        state.appendChild(span);
      }
      if (TERMINAL[data.status]) {
        source.close();
        refresh();
      } else {
        refreshSoon();
      }
    });
  }

  // --- Live lists (overview, jobs, runs, tracks): the server says "changed",
  // the page fetches itself and swaps its #live-region; the badge says whether
  // the stream is up. Selected checkboxes stay selected across a swap. ---
  var region = document.getElementById("live-region");
  var badge = document.getElementById("live-badge");
  if (region && region.dataset.live) {
    var setBadge = function (live) {
      if (!badge) return;
      badge.textContent = live ? "live" : "disconnected (retrying)";
      badge.classList.toggle("on", live);
      badge.classList.toggle("off", !live);
    };
    var swapping = false;
    var again = false;
    var swap = function () {
      if (swapping) { again = true; return; }
      swapping = true;
      refetch("live-region")
        .then(function (found) {
          if (!found) return;
          var fresh = found.fresh, mine = found.mine;
          var checked = {};
          mine.querySelectorAll("input[type=checkbox]:checked").forEach(function (c) { checked[c.value] = true; });
          fresh.querySelectorAll("input[type=checkbox]").forEach(function (c) { if (checked[c.value]) c.checked = true; });
          mine.replaceWith(fresh);
          fresh.dataset.refreshed = String(Number(mine.dataset.refreshed || "0") + 1);
        })
        .catch(function () {})
        .then(function () {
          swapping = false;
          if (again) { again = false; swap(); }
        });
    };
    // The stream starts from the marker this page was drawn from, so a change
    // made before it opened still arrives as "changed".
    var since = region.dataset.since ? "?since=" + encodeURIComponent(region.dataset.since) : "";
    var live = new EventSource("/ui/live/" + encodeURIComponent(region.dataset.live) + "/events" + since);
    live.addEventListener("ready", function () { setBadge(true); });
    live.addEventListener("changed", function () { setBadge(true); swap(); });
    live.onerror = function () { setBadge(false); };
    live.onopen = function () { setBadge(true); };
  }
})();
