//! Task type detection and duration estimates: the rules the reference loop planner
//! never defined, as data.
//!
//! The rules and the duration table: docs/decisions.md, "Task types and durations".

use super::TaskType;

/// One detection rule; see the module documentation for how each list matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeRule {
    pub kind: TaskType,
    pub dirs: &'static [&'static str],
    pub path_prefixes: &'static [&'static str],
    pub extensions: &'static [&'static str],
    pub name_prefixes: &'static [&'static str],
    pub name_infixes: &'static [&'static str],
    pub keywords: &'static [&'static str],
}

/// The detection table, in precedence order (`code` is the fallback, not a rule).
pub const TYPE_RULES: [TypeRule; 5] = [
    TypeRule {
        kind: TaskType::Test,
        dirs: &["test", "tests", "__tests__"],
        path_prefixes: &[],
        extensions: &[],
        name_prefixes: &["test_"],
        name_infixes: &[".test.", "_test.", ".spec."],
        keywords: &["test", "tests", "testing", "e2e", "coverage"],
    },
    TypeRule {
        kind: TaskType::Ui,
        dirs: &[],
        path_prefixes: &["src/components/"],
        extensions: &["tsx", "jsx", "vue", "svelte", "css"],
        name_prefixes: &[],
        name_infixes: &[],
        keywords: &[
            "ui",
            "component",
            "components",
            "page",
            "screen",
            "layout",
            "frontend",
            "css",
            "styling",
            "button",
            "modal",
            "form",
        ],
    },
    TypeRule {
        kind: TaskType::Integration,
        dirs: &["api"],
        path_prefixes: &[],
        extensions: &[],
        name_prefixes: &[],
        name_infixes: &[],
        keywords: &[
            "stripe",
            "supabase",
            "webhook",
            "webhooks",
            "oauth",
            "firebase",
            "auth0",
            "twilio",
            "sendgrid",
            "paypal",
            "slack",
            "integration",
        ],
    },
    TypeRule {
        kind: TaskType::Docs,
        dirs: &["docs"],
        path_prefixes: &[],
        extensions: &["md"],
        name_prefixes: &[],
        name_infixes: &[],
        keywords: &[
            "doc",
            "docs",
            "document",
            "documentation",
            "readme",
            "changelog",
        ],
    },
    TypeRule {
        kind: TaskType::Config,
        dirs: &[],
        path_prefixes: &[],
        extensions: &["json", "yaml", "yml", "toml"],
        name_prefixes: &[".env"],
        name_infixes: &[],
        keywords: &[
            "config",
            "configuration",
            "configure",
            "env",
            "settings",
            "dotenv",
        ],
    },
];

impl TypeRule {
    /// `path` must already be normalized (see [`normalize_for_matching`]).
    fn matches_file(&self, path: &str) -> bool {
        let (dirs, file_name) = match path.rsplit_once('/') {
            Some((dirs, name)) => (dirs, name),
            None => ("", path),
        };
        let extension = file_name
            .rsplit_once('.')
            // `.env` has no extension: a leading dot starts a hidden name.
            .filter(|(stem, _)| !stem.is_empty())
            .map(|(_, extension)| extension);
        dirs.split('/').any(|segment| self.dirs.contains(&segment))
            || self
                .path_prefixes
                .iter()
                .any(|prefix| path.starts_with(prefix) || path.contains(&format!("/{prefix}")))
            || extension.is_some_and(|extension| self.extensions.contains(&extension))
            || self
                .name_prefixes
                .iter()
                .any(|prefix| file_name.starts_with(prefix))
            || self
                .name_infixes
                .iter()
                .any(|infix| file_name.contains(infix))
    }

    fn matches_words(&self, words: &[String]) -> bool {
        words
            .iter()
            .any(|word| self.keywords.contains(&word.as_str()))
    }
}

/// Lower-cased, `\` → `/`, leading `./` removed.
fn normalize_for_matching(path: &str) -> String {
    let mut path = path.to_ascii_lowercase().replace('\\', "/");
    while let Some(rest) = path.strip_prefix("./") {
        path = rest.to_owned();
    }
    path
}

/// Lower-cased runs of ASCII letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The task type by the [`TYPE_RULES`] table: files first, then keywords, else `code`.
pub fn detect_type(files: &[String], name: &str, description: &str) -> TaskType {
    let paths: Vec<String> = files.iter().map(|f| normalize_for_matching(f)).collect();
    if let Some(rule) = TYPE_RULES
        .iter()
        .find(|rule| paths.iter().any(|path| rule.matches_file(path)))
    {
        return rule.kind;
    }
    let mut all_words = words(name);
    all_words.extend(words(description));
    TYPE_RULES
        .iter()
        .find(|rule| rule.matches_words(&all_words))
        .map_or(TaskType::Code, |rule| rule.kind)
}

/// Longest estimate, in minutes.
const MAX_ESTIMATE_MINUTES: u32 = 8 * 60;

/// `(base, per extra file)` minutes per type.
const fn duration_rates(kind: TaskType) -> (u32, u32) {
    match kind {
        TaskType::Code => (30, 15),
        TaskType::Ui => (45, 15),
        TaskType::Integration => (60, 30),
        TaskType::Test => (30, 15),
        TaskType::Docs => (15, 15),
        TaskType::Config => (15, 15),
    }
}

/// Estimated minutes for a task of `kind` touching `file_count` files (formula in the
/// module documentation).
pub fn estimate_duration(kind: TaskType, file_count: usize) -> u32 {
    let (base, per_file) = duration_rates(kind);
    let extra = u32::try_from(file_count.saturating_sub(1)).unwrap_or(u32::MAX);
    base.saturating_add(per_file.saturating_mul(extra))
        .min(MAX_ESTIMATE_MINUTES)
}

/// `45m`, `1h`, `1h30m`; `0m` for zero.
pub fn format_duration(minutes: u32) -> String {
    match (minutes / 60, minutes % 60) {
        (0, minutes) => format!("{minutes}m"),
        (hours, 0) => format!("{hours}h"),
        (hours, minutes) => format!("{hours}h{minutes}m"),
    }
}

/// Longest accepted duration, in minutes.
const MAX_DURATION_MINUTES: u64 = 10_000 * 60;

/// Parses a duration (grammar in the module documentation) into minutes.
pub fn parse_duration_minutes(text: &str) -> Option<u32> {
    let text = text.trim().to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut position = 0;
    let mut total: u64 = 0;
    // 0 = nothing read yet, 1 = hours read, 2 = minutes read: units must descend.
    let mut last_unit = 0;
    let skip_spaces = |position: &mut usize| {
        while *position < bytes.len() && bytes[*position] == b' ' {
            *position += 1;
        }
    };
    skip_spaces(&mut position);
    if position == bytes.len() {
        return None;
    }
    while position < bytes.len() {
        // Number: digits, optionally `.digits`, read as an exact fraction.
        let start = position;
        while position < bytes.len() && bytes[position].is_ascii_digit() {
            position += 1;
        }
        let whole = &text[start..position];
        let mut fraction = "";
        if position < bytes.len() && bytes[position] == b'.' {
            let fraction_start = position + 1;
            position = fraction_start;
            while position < bytes.len() && bytes[position].is_ascii_digit() {
                position += 1;
            }
            fraction = &text[fraction_start..position];
            if fraction.is_empty() {
                return None;
            }
        }
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        skip_spaces(&mut position);
        let unit_start = position;
        while position < bytes.len() && bytes[position].is_ascii_alphabetic() {
            position += 1;
        }
        let (unit, minutes_per_unit) = match &text[unit_start..position] {
            "h" | "hr" | "hrs" | "hour" | "hours" => (1, 60u64),
            "m" | "min" | "mins" | "minute" | "minutes" => (2, 1u64),
            _ => return None,
        };
        if unit <= last_unit {
            return None;
        }
        last_unit = unit;
        total = total.checked_add(exact_minutes(whole, fraction, minutes_per_unit)?)?;
        if total > MAX_DURATION_MINUTES {
            return None;
        }
        skip_spaces(&mut position);
    }
    u32::try_from(total).ok()
}

/// `whole.fraction × per_unit` when that is a whole number of minutes.
fn exact_minutes(whole: &str, fraction: &str, per_unit: u64) -> Option<u64> {
    // Long digit runs cannot be within the cap; refuse before parsing.
    if whole.len() > 9 || fraction.len() > 9 {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let scale = 10u64.pow(u32::try_from(fraction.len()).ok()?);
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    let scaled = whole
        .checked_mul(scale)?
        .checked_add(fraction)?
        .checked_mul(per_unit)?;
    scaled.is_multiple_of(scale).then_some(scaled / scale)
}

/// A given duration in canonical form (`90m` → `1h30m`, `1.5h` → `1h30m`), or `None`
/// when it cannot be read.
pub fn normalize_duration(text: &str) -> Option<String> {
    parse_duration_minutes(text).map(format_duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| (*p).to_owned()).collect()
    }

    fn by_file(path: &str) -> TaskType {
        detect_type(&files(&[path]), "", "")
    }

    fn by_words(name: &str, description: &str) -> TaskType {
        detect_type(&[], name, description)
    }

    #[test]
    fn each_file_rule_and_their_precedence() {
        use TaskType::{Code, Config, Docs, Integration, Test, Ui};
        for (path, task_type) in [
            ("test/a.py", Test),
            ("tests/test_cache.py", Test),
            ("src/__tests__/a.ts", Test),
            ("src/a.test.ts", Test),
            ("pkg/cache_test.go", Test),
            ("src/a.spec.js", Test),
            ("test_cache.py", Test),
            ("./TESTS/A.PY", Test),
            ("src\\tests\\a.rs", Test),
            // Not tests: a directory merely named like one, a name merely containing it.
            ("src/testing/a.py", Code),
            ("src/contest.py", Code),
            ("src/attest_x.py", Code),
            ("src/components/Button.ts", Ui),
            ("app/src/components/x/y.js", Ui),
            ("a.tsx", Ui),
            ("a.jsx", Ui),
            ("a.vue", Ui),
            ("a.svelte", Ui),
            ("styles/site.css", Ui),
            ("lib/components/a.py", Code),
            ("src/api/webhooks.py", Integration),
            ("api/x.go", Integration),
            ("src/apis/x.go", Code),
            ("docs/auth.txt", Docs),
            ("README.md", Docs),
            ("docs/x.md", Docs),
            ("package.json", Config),
            ("a.yaml", Config),
            ("b.yml", Config),
            ("Cargo.toml", Config),
            (".env", Config),
            (".env.local", Config),
            ("deploy/.env.example", Config),
            // A dotfile has no extension: `.json` alone is not a JSON file.
            (".json", Code),
            // Where rules overlap: test > ui > integration > docs > config.
            ("src/components/x.test.tsx", Test),
            ("src/api/Form.tsx", Ui),
            ("api/README.md", Integration),
            ("docs/openapi.yaml", Docs),
        ] {
            assert_eq!(by_file(path), task_type, "{path}");
        }
    }

    #[test]
    fn precedence_between_files() {
        // Any file of a higher rule wins over the order of files.
        assert_eq!(
            detect_type(&files(&["a.json", "b.md", "c.tsx"]), "", ""),
            TaskType::Ui
        );
        assert_eq!(
            detect_type(&files(&["src/x.py", "tests/x.py"]), "", ""),
            TaskType::Test
        );
    }

    #[test]
    fn files_beat_keywords() {
        let docs = files(&["docs/payments.md"]);
        assert_eq!(
            detect_type(&docs, "Document stripe", "webhook"),
            TaskType::Docs
        );
    }

    #[test]
    fn keyword_fallback_in_precedence_order() {
        assert_eq!(by_words("Cache tests", ""), TaskType::Test);
        assert_eq!(by_words("Login page", ""), TaskType::Ui);
        assert_eq!(by_words("Stripe webhook auth", ""), TaskType::Integration);
        assert_eq!(by_words("x", "talk to Supabase"), TaskType::Integration);
        assert_eq!(by_words("Document tenancy auth", ""), TaskType::Docs);
        assert_eq!(by_words("Configure env", ""), TaskType::Config);
        assert_eq!(by_words("Token cache", "TTL cache"), TaskType::Code);
        // test > ui > integration > docs > config among keywords too.
        assert_eq!(by_words("UI tests", ""), TaskType::Test);
        assert_eq!(by_words("Stripe form", ""), TaskType::Ui);
        assert_eq!(
            by_words("Document the Stripe webhook", ""),
            TaskType::Integration
        );
        assert_eq!(by_words("Document config", ""), TaskType::Docs);
        // Whole words only.
        assert_eq!(
            by_words("Attestation", "stripes, documents"),
            TaskType::Code
        );
        // Files that say nothing fall back to keywords.
        assert_eq!(
            detect_type(&files(&["src/pay/stripe.py"]), "Stripe", ""),
            TaskType::Integration
        );
    }

    #[test]
    fn estimate_formula() {
        assert_eq!(estimate_duration(TaskType::Code, 0), 30);
        assert_eq!(estimate_duration(TaskType::Code, 1), 30);
        assert_eq!(estimate_duration(TaskType::Code, 3), 60);
        assert_eq!(estimate_duration(TaskType::Ui, 2), 60);
        assert_eq!(estimate_duration(TaskType::Integration, 2), 90);
        assert_eq!(estimate_duration(TaskType::Test, 1), 30);
        assert_eq!(estimate_duration(TaskType::Docs, 1), 15);
        assert_eq!(estimate_duration(TaskType::Config, 2), 30);
        assert_eq!(estimate_duration(TaskType::Integration, 1_000_000), 480);
    }

    #[test]
    fn formatting() {
        assert_eq!(format_duration(0), "0m");
        assert_eq!(format_duration(30), "30m");
        assert_eq!(format_duration(60), "1h");
        assert_eq!(format_duration(90), "1h30m");
        assert_eq!(format_duration(605), "10h5m");
    }

    #[test]
    fn normalization() {
        for (given, expected) in [
            ("30m", "30m"),
            ("90m", "1h30m"),
            ("60m", "1h"),
            ("1.5h", "1h30m"),
            ("0.25h", "15m"),
            (".5h", "30m"),
            ("1h30m", "1h30m"),
            ("1h 30m", "1h30m"),
            ("1 hour 30 minutes", "1h30m"),
            ("2 Hours", "2h"),
            ("45 min", "45m"),
            ("1h90m", "2h30m"),
            ("  2hrs ", "2h"),
            ("0m", "0m"),
        ] {
            assert_eq!(
                normalize_duration(given).as_deref(),
                Some(expected),
                "{given}"
            );
        }
        for bad in [
            "",
            "  ",
            "90",
            "1d",
            "30s",
            "m",
            "1.h",
            "1.5m",
            "30m1h",
            "1h1h",
            "1h-30m",
            "abc",
            "99999999999h",
            "10001h",
            "1..5h",
        ] {
            assert_eq!(normalize_duration(bad), None, "{bad}");
        }
    }
}
