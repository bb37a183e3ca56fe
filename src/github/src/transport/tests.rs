use super::*;

fn raw(status: u16, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    Raw {
        status: StatusCode::from_u16(status).unwrap(),
        headers: h,
        body: Bytes::from(body.to_string()),
    }
}

#[test]
fn the_clock_skew_is_read_from_githubs_date_header_and_small_ones_are_noise() {
    let local = chrono::DateTime::parse_from_rfc3339("2026-12-03T15:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let mut headers = HeaderMap::new();
    assert_eq!(skew_of(&headers, local), None);
    headers.insert(
        http::header::DATE,
        HeaderValue::from_static("Thu, 03 Dec 2026 15:10:00 GMT"),
    );
    assert_eq!(
        skew_of(&headers, local),
        Some(chrono::TimeDelta::minutes(10))
    );
    headers.insert(
        http::header::DATE,
        HeaderValue::from_static("Thu, 03 Dec 2026 14:55:00 GMT"),
    );
    assert_eq!(
        skew_of(&headers, local),
        Some(chrono::TimeDelta::minutes(-5))
    );
    headers.insert(
        http::header::DATE,
        HeaderValue::from_static("Thu, 03 Dec 2026 15:00:01 GMT"),
    );
    assert_eq!(skew_of(&headers, local), Some(chrono::TimeDelta::zero()));
    headers.insert(http::header::DATE, HeaderValue::from_static("yesterday"));
    assert_eq!(skew_of(&headers, local), None);
}

#[test]
fn next_link_is_found_among_other_relations() {
    let r = raw(
        200,
        &[(
            "link",
            "<https://api.github.com/x?page=1>; rel=\"prev\", <https://api.github.com/x?page=3>; rel=\"next\"",
        )],
        "[]",
    );
    assert_eq!(
        r.next_link().as_deref(),
        Some("https://api.github.com/x?page=3")
    );
    assert_eq!(raw(200, &[("link", "garbage")], "").next_link(), None);
    assert_eq!(raw(200, &[], "").next_link(), None);
}

#[test]
fn waits_come_from_retry_after_or_the_reset() {
    let r = raw(
        403,
        &[("retry-after", "7")],
        "{\"message\":\"secondary rate limit\"}",
    );
    assert!(r.is_rate_limited());
    assert_eq!(r.requested_wait(0), Some(Duration::from_secs(7)));
    let r = raw(
        403,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1100"),
        ],
        "{}",
    );
    assert!(r.is_rate_limited());
    assert_eq!(r.requested_wait(1000), Some(Duration::from_secs(100)));
    let r = raw(
        403,
        &[("retry-after", "soon")],
        "{\"message\":\"Forbidden\"}",
    );
    assert_eq!(r.requested_wait(0), None);
    let r = raw(403, &[], "{\"message\":\"Resource not accessible\"}");
    assert!(!r.is_rate_limited());
}

#[test]
fn the_secondary_wait_starts_at_a_minute_and_doubles_up_to_the_cap() {
    let secs: Vec<u64> = (1..=7).map(|n| secondary_wait(n).as_secs()).collect();
    assert_eq!(secs, [60, 120, 240, 480, 960, 1800, 1800]);
    assert_eq!(secondary_wait(0), SECONDARY_MIN_WAIT);
    assert_eq!(secondary_wait(u32::MAX), SECONDARY_MAX_WAIT);
}

#[test]
fn a_secondary_limit_without_retry_after_pauses_at_least_a_minute_then_longer() {
    let now = chrono::DateTime::from_timestamp(1_000_000, 0).unwrap();
    let mut limit = SecondaryLimit::default();
    let rejected = raw(
        403,
        &[("x-ratelimit-remaining", "4000")],
        "{\"message\":\"You have exceeded a secondary rate limit.\"}",
    );
    assert!(rejected.is_secondary_limit());
    let wait = limit.on_limited(&rejected, "/repos/o/n/pulls", false, now);
    assert_eq!(wait, Some(Duration::from_secs(60)));
    let pause = limit.active(now).expect("paused");
    assert_eq!(pause.until, now + chrono::TimeDelta::seconds(60));
    assert_eq!(pause.route, "/repos/o/n/pulls");
    // Another request rejected during the same pause does not lengthen it.
    let later = now + chrono::TimeDelta::seconds(10);
    assert_eq!(
        limit.on_limited(&rejected, "/repos/o/n/issues", false, later),
        Some(Duration::from_secs(50))
    );
    // Rejected again after the pause: twice as long.
    let after = now + chrono::TimeDelta::seconds(61);
    assert!(limit.active(after).is_none());
    assert_eq!(
        limit.on_limited(&rejected, "/repos/o/n/pulls", false, after),
        Some(Duration::from_secs(120))
    );
    // Any 429 without a wait is the same limit.
    let too_many = raw(429, &[], "{}");
    let much_later = after + chrono::TimeDelta::seconds(121);
    assert_eq!(
        limit.on_limited(&too_many, "/x", false, much_later),
        Some(Duration::from_secs(240))
    );
    // An answer after the pause resets the count.
    let done = much_later + chrono::TimeDelta::seconds(241);
    limit.on_answered(done);
    assert_eq!(
        limit.on_limited(&too_many, "/x", false, done),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn retry_after_and_a_spent_primary_window_are_obeyed_as_given() {
    let now = chrono::DateTime::from_timestamp(1_000, 0).unwrap();
    let mut limit = SecondaryLimit::default();
    let told = raw(
        403,
        &[("retry-after", "7")],
        "{\"message\":\"secondary rate limit\"}",
    );
    assert_eq!(
        limit.on_limited(&told, "/a", true, now),
        Some(Duration::from_secs(7))
    );
    assert_eq!(
        limit.active(now).map(|p| p.until),
        Some(now + chrono::TimeDelta::seconds(7)),
        "the told wait pauses the other writes too"
    );
    assert!(limit.holding(true, now).is_some());
    assert!(
        limit.holding(false, now).is_none(),
        "a limit on writes leaves reads going"
    );
    let mut limit = SecondaryLimit::default();
    let primary = raw(
        403,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1100"),
        ],
        "{\"message\":\"API rate limit exceeded\"}",
    );
    assert!(!primary.is_secondary_limit());
    assert_eq!(
        limit.on_limited(&primary, "/a", false, now),
        Some(Duration::from_secs(100))
    );
    assert!(limit.active(now).is_none());
}

#[test]
fn statuses_map_to_typed_errors_and_bad_bodies_do_not_panic() {
    let e = status_error(
        "create ref",
        &raw(422, &[], "{\"message\":\"Reference already exists\"}"),
    );
    assert!(matches!(e, GithubError::AlreadyExists { .. }));
    let e = status_error(
        "move ref",
        &raw(422, &[], "{\"message\":\"Update is not a fast forward\"}"),
    );
    assert!(matches!(e, GithubError::NotFastForward { .. }));
    let e = status_error("x", &raw(401, &[], "<html>"));
    assert!(matches!(e, GithubError::Unauthorized { ref message, .. } if message == "HTTP 401"));
    let e = status_error("x", &raw(418, &[], "\u{0}\u{1}"));
    assert!(matches!(e, GithubError::Rejected { status: 418, .. }));
    let r = raw(200, &[], "{not json");
    let e = r.json::<Value>("read pull").unwrap_err();
    assert!(e.to_string().contains("read pull"));
}
