use super::*;
use serde_json::json;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn cluster(id: &str, alloc: u64, mixed: u64, idle: u64, down: u64) -> Value {
    json!({
        "clusterId": id, "stale": false, "status": "operational",
        "observedAt": "2026-12-01T09:59:30Z", "receivedAt": "2026-12-01T09:59:40Z",
        "summary": {"totalNodes": alloc + mixed + idle + down, "allocatedNodes": alloc,
                    "mixedNodes": mixed, "idleNodes": idle, "downNodes": down, "otherNodes": 0}
    })
}

fn answer(clusters: Vec<Value>) -> Value {
    json!({"kind": KIND, "generatedAt": "2026-12-01T09:59:50Z",
           "data": {"available": true, "clusters": clusters}, "schemaVersion": 9})
}

fn parse(v: &Value) -> Result<CapacityReport, CapacityError> {
    parse_report(v.to_string().as_bytes(), now())
}

fn err(v: Value) -> String {
    parse(&v).unwrap_err().to_string()
}

#[test]
fn a_valid_answer_parses_and_ignores_unknown_fields() {
    let r = parse(&answer(vec![cluster("h100-dgxc-slurm", 10, 2, 6, 2)])).unwrap();
    assert_eq!(r.clusters.len(), 1);
    assert_eq!(r.clusters[0].summary.idle, 6);
    assert_eq!(r.clusters[0].ineligible(), None);
}

#[test]
fn every_malformed_answer_names_its_field() {
    let base = answer(vec![cluster("a", 1, 0, 1, 0)]);
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut v = base.clone();
    v["kind"] = json!("other");
    cases.push((v, "kind"));
    let mut v = base.clone();
    v.as_object_mut().unwrap().remove("kind");
    cases.push((v, "kind: missing"));
    let mut v = base.clone();
    v["generatedAt"] = json!("2026-12-01T09:57:00Z");
    cases.push((v, "generatedAt: 2026-12-01 09:57:00 UTC is 180s old"));
    let mut v = base.clone();
    v["generatedAt"] = json!("2026-12-01T10:00:10Z");
    cases.push((v, "generatedAt: 2026-12-01 10:00:10 UTC is in the future"));
    let mut v = base.clone();
    v["generatedAt"] = json!("yesterday");
    cases.push((v, "generatedAt: \"yesterday\" is not RFC 3339"));
    let mut v = base.clone();
    v["data"]["available"] = json!(false);
    cases.push((v, "data.available: false"));
    let mut v = base.clone();
    v["data"]["clusters"] = json!({});
    cases.push((v, "data.clusters: expected a list"));
    let mut v = base.clone();
    v["data"]["clusters"][0]["clusterId"] = json!("");
    cases.push((v, "data.clusters[0].clusterId: expected a non-empty string"));
    let mut v = base.clone();
    v["data"]["clusters"][0]["stale"] = json!("no");
    cases.push((v, "data.clusters[0] (a).stale: expected a boolean"));
    let mut v = base.clone();
    v["data"]["clusters"][0]["summary"]["idleNodes"] = json!(-1);
    cases.push((
        v,
        "data.clusters[0] (a).summary.idleNodes: expected a non-negative integer",
    ));
    let mut v = base.clone();
    v["data"]["clusters"][0]["summary"]["totalNodes"] = json!(5);
    cases.push((
        v,
        "summary.totalNodes: 5 but allocated+mixed+idle+down+other = 2",
    ));
    let mut v = base.clone();
    v["data"]["clusters"][0]["summary"] = json!({"totalNodes": 0, "allocatedNodes": 0,
        "mixedNodes": 0, "idleNodes": 0, "downNodes": 0, "otherNodes": 0});
    cases.push((v, "summary.totalNodes: must be greater than 0"));
    let mut v = base.clone();
    v["data"]["clusters"][0]["observedAt"] = json!("2026-12-01T09:59:59Z");
    cases.push((v, "observedAt: 2026-12-01 09:59:59 UTC is after receivedAt"));
    let mut v = base.clone();
    v["data"]["clusters"][0]["receivedAt"] = json!("2026-12-01T10:00:00Z");
    cases.push((
        v,
        "receivedAt: 2026-12-01 10:00:00 UTC is after generatedAt",
    ));
    let v = answer(vec![cluster("a", 1, 0, 1, 0), cluster("a", 1, 0, 1, 0)]);
    cases.push((v, "data.clusters[1].clusterId: \"a\" appears twice"));
    for (v, want) in cases {
        let e = err(v);
        assert!(e.contains(want), "{e:?} should contain {want:?}");
    }
    assert!(
        parse_report(b"<html>", now())
            .unwrap_err()
            .to_string()
            .contains("not JSON")
    );
    assert!(err(json!([1])).contains("expected a JSON object"));
}

#[test]
fn freshness_allows_the_skew() {
    let mut v = answer(vec![]);
    v["generatedAt"] = json!("2026-12-01T09:57:56Z"); // 124 s
    assert!(parse(&v).is_ok());
    v["generatedAt"] = json!("2026-12-01T10:00:04Z"); // 4 s ahead
    assert!(parse(&v).is_ok());
}

#[test]
fn eligibility_follows_the_incumbent_rule() {
    let c = |a, m, i, d| {
        let v = answer(vec![cluster("x", a, m, i, d)]);
        parse(&v).unwrap().clusters[0].ineligible()
    };
    assert_eq!(c(3, 0, 2, 0), None); // 60 %
    assert!(c(4, 0, 1, 0).unwrap().contains("80% or more")); // exactly 80 %
    assert!(c(3, 1, 0, 1).unwrap().contains("no idle node"));
    assert_eq!(c(1, 2, 6, 1), None);
    let mut v = answer(vec![cluster("x", 0, 0, 5, 0)]);
    v["data"]["clusters"][0]["stale"] = json!(true);
    assert!(
        parse(&v).unwrap().clusters[0]
            .ineligible()
            .unwrap()
            .contains("stale")
    );
    for (status, ok) in [
        ("operational", true),
        ("degraded", true),
        ("maintenance", false),
    ] {
        let mut v = answer(vec![cluster("x", 0, 0, 5, 0)]);
        v["data"]["clusters"][0]["status"] = json!(status);
        assert_eq!(
            parse(&v).unwrap().clusters[0].ineligible().is_none(),
            ok,
            "{status}"
        );
    }
}

#[test]
fn a_family_proceeds_when_one_of_its_clusters_has_room() {
    let r = parse(&answer(vec![
        cluster("h100-cw", 9, 0, 1, 0),
        cluster("h100-dgxc-slurm-east", 1, 0, 9, 0),
        cluster("h100-dgxcx", 0, 0, 9, 0),
    ]))
    .unwrap();
    let w = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        decide(&r, &w(&["h100-cw", "h100-dgxc-slurm"])),
        Verdict::Eligible {
            cluster: "h100-dgxc-slurm-east".into()
        }
    );
    match decide(&r, &w(&["h100-cw"])) {
        Verdict::Deferred(why) => assert!(why.contains("h100-cw is 9/10"), "{why}"),
        v => panic!("{v:?}"),
    }
    // `h100-dgxcx` does not belong to `h100-dgx`: the prefix needs a dash.
    match decide(&r, &w(&["h100-dgx"])) {
        Verdict::Deferred(why) => assert!(why.contains("none of the clusters h100-dgx")),
        v => panic!("{v:?}"),
    }
}

#[test]
fn node_names_lose_their_number() {
    assert_eq!(cluster_of_node("h100-dgxc-slurm_07"), "h100-dgxc-slurm");
    assert_eq!(cluster_of_node("h200-nb_1"), "h200-nb");
    assert_eq!(cluster_of_node("gb200-nv_x"), "gb200-nv_x");
    assert_eq!(cluster_of_node("plain"), "plain");
}

#[test]
fn clusters_come_from_the_real_runners_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/inferencex/full/configs/runners.yaml"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        assert!(std::env::var_os("CI").is_none(), "fixture {path} missing");
        eprintln!("SKIPPED: fixture {path} missing");
        return;
    };
    let r = RunnerClusters::parse("configs/runners.yaml", &text).unwrap();
    assert_eq!(
        r.clusters("h100").unwrap(),
        ["h100-cw".to_string(), "h100-dgxc-slurm".to_string()]
    );
    assert_eq!(r.clusters("h100-multinode").unwrap(), ["h100-dgxc-slurm"]);
    assert_eq!(r.clusters("cluster:mi300x-tw").unwrap(), ["mi300x-tw"]);
    assert!(r.clusters("nope").is_none());
    // Deterministic: the same file gives the same answer.
    assert_eq!(r, RunnerClusters::parse("x", &text).unwrap());
}

#[test]
fn a_malformed_runners_file_names_the_line() {
    let e = RunnerClusters::parse("configs/runners.yaml", "labels:\n  h100: 3\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("configs/runners.yaml:2: labels.h100"),
        "{e}"
    );
}

#[test]
fn the_http_client_refuses_origins_with_paths_and_empty_keys() {
    let t = Duration::from_secs(1);
    let k = || "k".to_string();
    assert!(HttpCapacity::new("https://d.example", DEFAULT_PATH, k(), t).is_ok());
    for o in [
        "https://d.example/x",
        "ftp://d.example",
        "https://u:p@d.example",
        "nope",
    ] {
        assert!(HttpCapacity::new(o, DEFAULT_PATH, k(), t).is_err(), "{o}");
    }
    assert!(HttpCapacity::new("https://d.example", "//evil.example/x", k(), t).is_err());
    let e = HttpCapacity::new("https://d.example", DEFAULT_PATH, " ".into(), t).unwrap_err();
    assert!(e.to_string().contains("key is empty"));
    let c = HttpCapacity::new("https://d.example", DEFAULT_PATH, "s3cret".into(), t).unwrap();
    assert!(!format!("{c:?}").contains("s3cret"));
}
