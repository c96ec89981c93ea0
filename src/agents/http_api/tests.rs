use super::*;

#[test]
fn endpoints_per_api_with_defaults_and_trailing_slashes() {
    let t = Duration::from_secs(5);
    let url = |api, base: Option<&str>| {
        HttpConfig::new(api, base, "m".into(), None, t, 10).map(|c| c.url.to_string())
    };
    for (api, base, endpoint) in [
        (
            Api::Openai,
            None,
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            Api::Openai,
            Some("http://127.0.0.1:8000/v1/"),
            "http://127.0.0.1:8000/v1/chat/completions",
        ),
        (
            Api::Anthropic,
            None,
            "https://api.anthropic.com/v1/messages",
        ),
        (
            Api::Anthropic,
            Some("http://h:1//"),
            "http://h:1/v1/messages",
        ),
    ] {
        assert_eq!(url(api, base).unwrap(), endpoint, "{base:?}");
    }
    assert!(
        url(Api::Openai, Some("ftp://h"))
            .unwrap_err()
            .contains("http")
    );
    assert!(url(Api::Openai, Some("not a url")).is_err());
    assert!(url(Api::Openai, Some("http://h/v1?x=1")).is_err());
}

#[test]
fn debug_never_shows_the_key() {
    let c = HttpConfig::new(
        Api::Openai,
        None,
        "m".into(),
        Some("sk-secret-123".into()),
        Duration::from_secs(1),
        10,
    )
    .unwrap();
    assert!(!format!("{c:?}").contains("sk-secret-123"));
}

#[test]
fn backoff_doubles_with_jitter_and_honours_retry_after() {
    let b = Backoff::default();
    for _ in 0..50 {
        let d2 = b.delay(2, None);
        assert!(d2 >= Duration::from_millis(187) && d2 <= Duration::from_millis(313));
        let d4 = b.delay(4, None);
        assert!(d4 >= Duration::from_millis(750) && d4 <= Duration::from_millis(1250));
    }
    assert_eq!(
        b.delay(2, Some(Duration::from_secs(3))),
        Duration::from_secs(3)
    );
    assert_eq!(b.delay(2, Some(Duration::from_secs(3600))), MAX_RETRY_DELAY);
    assert_eq!(b.delay(40, None), MAX_RETRY_DELAY);
}

#[test]
fn retry_after_seconds_only() {
    let mut h = HeaderMap::new();
    assert_eq!(retry_after(&h), None);
    h.insert(RETRY_AFTER, HeaderValue::from_static(" 7 "));
    assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
    h.insert(
        RETRY_AFTER,
        HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
    );
    assert_eq!(retry_after(&h), None);
}

#[test]
fn answers_are_extracted() {
    let v = json!({"choices": [{"message": {"role": "assistant", "content": "hi"}}]});
    assert_eq!(openai_answer(&v).unwrap(), "hi");
    let v = json!({"choices": [{"message": {"content": [
        {"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}}]});
    assert_eq!(openai_answer(&v).unwrap(), "ab");
    assert!(openai_answer(&json!({"choices": []})).is_err());
    assert!(openai_answer(&json!({"choices": [{"message": {"content": null}}]})).is_err());

    let v = json!({"content": [
        {"type": "thinking", "thinking": "x"},
        {"type": "text", "text": "one "},
        {"type": "text", "text": "two"}]});
    assert_eq!(anthropic_answer(&v).unwrap(), "one two");
    assert!(anthropic_answer(&json!({"content": []})).is_err());
    assert!(anthropic_answer(&json!({"error": {}})).is_err());
}

#[test]
fn excerpts_are_short_and_one_line() {
    assert_eq!(excerpt(b""), "(empty body)");
    assert_eq!(excerpt(b"{\"error\":\n  \"bad\"}"), "{\"error\": \"bad\"}");
    let long = "x".repeat(1000);
    assert_eq!(excerpt(long.as_bytes()).chars().count(), EXCERPT_CHARS + 1);
}
