use super::*;

#[test]
fn a_check_without_capacity_says_so_in_one_spaced_sentence() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let check = runtime.block_on(check_capacity(None, None));
    assert_eq!(check.status, Status::Ok);
    assert!(!check.detail.contains("  "), "{}", check.detail);
}

#[test]
fn a_fresh_store_in_actions_needs_a_fixed_instance_id() {
    let store = || Check::ok("store", "no store at s yet; the first run creates it");
    let id = uuid::Uuid::from_u128(5);
    let warned = instance_check(store(), Ok(None), true);
    assert_eq!(warned.status, Status::Warn);
    assert!(warned.detail.contains("KLAUD_INSTANCE_ID"), "{warned:?}");
    assert_eq!(instance_check(store(), Ok(None), false), store());
    let fixed = instance_check(store(), Ok(Some(id)), true);
    assert_eq!(fixed.status, Status::Ok);
    assert!(fixed.detail.contains(&id.to_string()), "{fixed:?}");
    let bad = instance_check(store(), Err("not a UUID".into()), false);
    assert_eq!(bad.status, Status::Fail);
}

fn budget(remaining: u64, limit: u64) -> RateBudget {
    RateBudget {
        limit,
        remaining,
        used: limit - remaining,
        reset_unix: 0,
        resource: "core".into(),
    }
}

#[test]
fn a_budget_under_ten_percent_warns() {
    assert_eq!(budget_check(&budget(499, 5000), "x").status, Status::Warn);
    assert_eq!(budget_check(&budget(500, 5000), "x").status, Status::Ok);
    assert_eq!(budget_check(&budget(0, 0), "x").status, Status::Ok);
    let c = budget_check(&budget(4000, 5000), "GET /rate_limit");
    assert!(c.detail.contains("4000 of 5000"), "{}", c.detail);
}

#[test]
fn the_table_ends_with_the_counts_and_json_uses_lowercase_statuses() {
    let checks = vec![
        Check::ok("config", "fine"),
        Check::warn("baseline", "not set"),
        Check::fail("identity", "someone else"),
    ];
    let text = render(&checks);
    assert!(text.starts_with("CHECK"), "{text}");
    assert!(text.contains("identity  fail    someone else"), "{text}");
    assert!(text.ends_with("3 checks: 1 ok, 1 warn, 1 fail\n"), "{text}");
    let json = serde_json::to_value(&checks).unwrap();
    assert_eq!(json[2]["status"], "fail");
    assert_eq!(json[1]["name"], "baseline");
}

#[test]
fn repositories_must_be_owner_slash_name() {
    assert!(is_owner_name("a/b"));
    for bad in ["a", "a/", "/b", "a/b/c", ""] {
        assert!(!is_owner_name(bad), "{bad}");
    }
}

#[test]
fn a_missing_store_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deeper/store");
    let c = check_store(&path);
    assert_eq!(c.status, Status::Ok, "{}", c.detail);
    assert!(!path.exists());
    assert!(!dir.path().join("deeper").exists());
    let c = check_store(dir.path());
    assert_eq!(c.status, Status::Ok, "{}", c.detail);
    assert!(!dir.path().join("conf").exists());

    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(check_store(&file).status, Status::Fail);
    assert_eq!(check_store(&file.join("store")).status, Status::Fail);
}

#[test]
fn an_existing_store_opens_and_a_held_one_warns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::open(&path).unwrap());
    let c = check_store(&path);
    assert_eq!(c.status, Status::Ok, "{}", c.detail);
    assert!(c.detail.contains("0 candidate(s)"), "{}", c.detail);

    let held = Store::open(&path).unwrap();
    let c = check_store(&path);
    assert_eq!(c.status, Status::Warn, "{}", c.detail);
    assert!(c.detail.contains("held by a running Klaud"), "{}", c.detail);
    drop(held);
}
