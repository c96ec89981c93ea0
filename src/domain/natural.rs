//! Natural ("human") ordering of identifiers: `P2 < P10`, `t-2 < t-10`, `1.2 < 1.10`.
//!
//! A string is read as a sequence of tokens: a maximal run of ASCII digits is one
//! *number* token, every other byte is a token of its own. Tokens compare as follows:
//! two numbers by numeric value (any length — no overflow, leading zeros ignored),
//! two bytes by value, and a number against a byte as if the number were the byte
//! `'0'` (so numbers sort where digits sort in plain byte order). Sequences compare
//! lexicographically by token. Strings that are equal under that rule (`"01"` vs
//! `"1"`) are ordered by plain byte order, which makes the order total and consistent
//! with `==`.
//!
//! Working on bytes is sound for UTF-8: byte order equals code-point order, and ASCII
//! digits never occur inside a multi-byte sequence.

use std::cmp::Ordering;

/// Compares two strings in natural order (see the module documentation).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    natural_tokens_cmp(a.as_bytes(), b.as_bytes()).then_with(|| a.cmp(b))
}

/// Sorts `items` naturally by the string `key` returns (stable).
pub fn sort_naturally_by_key<T>(items: &mut [T], key: impl Fn(&T) -> &str) {
    items.sort_by(|x, y| natural_cmp(key(x), key(y)));
}

fn natural_tokens_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let ordering = match (x.is_ascii_digit(), y.is_ascii_digit()) {
            (true, true) => {
                let end_a = digit_run_end(a, i);
                let end_b = digit_run_end(b, j);
                let ordering = numeric_cmp(&a[i..end_a], &b[j..end_b]);
                i = end_a;
                j = end_b;
                ordering
            }
            (true, false) => {
                i = digit_run_end(a, i);
                j += 1;
                // `y` is not a digit, so this is never Equal.
                b'0'.cmp(&y)
            }
            (false, true) => {
                i += 1;
                j = digit_run_end(b, j);
                x.cmp(&b'0')
            }
            (false, false) => {
                i += 1;
                j += 1;
                x.cmp(&y)
            }
        };
        if ordering != Ordering::Equal {
            return ordering;
        }
    }
    // The shorter token sequence is a prefix of the longer one.
    (a.len() - i).cmp(&(b.len() - j))
}

fn digit_run_end(bytes: &[u8], start: usize) -> usize {
    bytes[start..]
        .iter()
        .position(|byte| !byte.is_ascii_digit())
        .map_or(bytes.len(), |offset| start + offset)
}

/// Compares two runs of ASCII digits by value without parsing (runs may be huge).
fn numeric_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let a = strip_leading_zeros(a);
    let b = strip_leading_zeros(b);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn strip_leading_zeros(digits: &[u8]) -> &[u8] {
    let first_significant = digits
        .iter()
        .position(|&digit| digit != b'0')
        .unwrap_or(digits.len());
    &digits[first_significant..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::{Equal, Greater, Less};

    /// Digit runs compare as numbers, other text bytewise, and leading zeros break
    /// ties by bytes so that the order stays total: each sample is below the next.
    #[test]
    fn samples_ascend_naturally() {
        let ascending = [
            "", "01", "1", "1.2", "1.10", "P2", "P10", "ab", "abc", "abd", "t-2", "t-007", "t-8",
            "t-10",
        ];
        for pair in ascending.windows(2) {
            assert_eq!(natural_cmp(pair[0], pair[1]), Less, "{pair:?}");
            assert_eq!(natural_cmp(pair[1], pair[0]), Greater, "{pair:?}");
        }
        assert_eq!(natural_cmp("same", "same"), Equal);
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        let big = "9".repeat(100);
        let bigger = format!("1{}", "0".repeat(100));
        assert_eq!(natural_cmp(&big, &bigger), Less);
    }

    #[test]
    fn numbers_sort_where_digits_sort_bytewise() {
        // '.' (0x2E) < digits (0x30..0x39) < 'a'
        assert_eq!(natural_cmp("a.", "a5"), Less);
        assert_eq!(natural_cmp("a5", "aa"), Less);
        assert_eq!(natural_cmp("a", "a5"), Less);
    }

    #[test]
    fn sorting_is_natural() {
        let mut ids = vec!["P10", "P2", "P1", "P1-A10", "P1-A2"];
        sort_naturally_by_key(&mut ids, |id| id);
        assert_eq!(ids, ["P1", "P1-A2", "P1-A10", "P2", "P10"]);
    }

    #[test]
    fn order_is_a_consistent_total_order_on_samples() {
        let samples = [
            "", "0", "00", "1", "01", "001", "2", "10", "a", "a0", "a00", "a1", "a01", "a.1",
            "a.10", "a.2", "a-1", "A1", "é1", "a1b", "a1b2", "a1b10", "a10b1", "~", "1a", "1.",
        ];
        for a in samples {
            assert_eq!(natural_cmp(a, a), Equal);
            for b in samples {
                assert_eq!(
                    natural_cmp(a, b),
                    natural_cmp(b, a).reverse(),
                    "{a:?} {b:?}"
                );
                if a != b {
                    assert_ne!(natural_cmp(a, b), Equal, "{a:?} {b:?}");
                }
                for c in samples {
                    if natural_cmp(a, b) == Less && natural_cmp(b, c) == Less {
                        assert_eq!(natural_cmp(a, c), Less, "{a:?} {b:?} {c:?}");
                    }
                }
            }
        }
    }
}
