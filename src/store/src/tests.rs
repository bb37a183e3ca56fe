use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Candidate {
    family: String,
    image: String,
    attempts: u32,
}

impl Record for Candidate {
    const VERSION: u32 = 1;
}

fn candidate(n: u32) -> Candidate {
    Candidate {
        family: format!("configs/nvidia-master.yaml:key-{n}"),
        image: format!("vllm/vllm-openai:v0.{n}.0"),
        attempts: n,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Counter {
    value: u64,
}

impl Record for Counter {
    const VERSION: u32 = 1;
}

/// Candidate at schema version 2: `attempts` became `repairs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CandidateV2 {
    family: String,
    image: String,
    repairs: u32,
}

impl Record for CandidateV2 {
    const VERSION: u32 = 2;

    fn upgrade(from: u32, mut data: serde_json::Value) -> Result<serde_json::Value, UpgradeError> {
        if from != 1 {
            return Err(UpgradeError::NoPath { from });
        }
        let shape = |field: &str, problem| UpgradeError::Shape {
            from,
            field: field.to_owned(),
            problem,
        };
        let object = data
            .as_object_mut()
            .ok_or_else(|| shape("record", "is not an object"))?;
        let attempts = object
            .remove("attempts")
            .ok_or_else(|| shape("attempts", "is missing"))?;
        object.insert("repairs".to_owned(), attempts);
        Ok(data)
    }
}

fn insert_raw(store: &Store, tree: &str, key: &[u8], bytes: &[u8]) {
    store
        .raw_tree(tree)
        .expect("tree opens")
        .insert(key, bytes)
        .expect("raw insert");
}

#[test]
fn put_get_remove_round_trip() {
    let store = Store::temporary().expect("temporary store");
    assert_eq!(
        store.get::<Candidate>(trees::CANDIDATES, "c1").unwrap(),
        None
    );

    store.put(trees::CANDIDATES, "c1", &candidate(1)).unwrap();
    store.put(trees::CANDIDATES, "c2", &candidate(2)).unwrap();
    store.put(trees::OUTCOMES, "c1", &candidate(9)).unwrap();

    assert_eq!(
        store.get::<Candidate>(trees::CANDIDATES, "c1").unwrap(),
        Some(candidate(1))
    );
    // Trees are separate namespaces.
    assert_eq!(
        store.get::<Candidate>(trees::OUTCOMES, "c1").unwrap(),
        Some(candidate(9))
    );

    store.put(trees::CANDIDATES, "c1", &candidate(3)).unwrap();
    assert_eq!(
        store.list::<Candidate>(trees::CANDIDATES).unwrap(),
        vec![
            ("c1".to_owned(), candidate(3)),
            ("c2".to_owned(), candidate(2))
        ]
    );

    assert!(store.remove(trees::CANDIDATES, "c1").unwrap());
    assert!(!store.remove(trees::CANDIDATES, "c1").unwrap());
    assert_eq!(
        store.get::<Candidate>(trees::CANDIDATES, "c1").unwrap(),
        None
    );
    assert_eq!(store.list::<Candidate>(trees::CANDIDATES).unwrap().len(), 1);
}

#[test]
fn records_are_json_in_a_versioned_envelope() {
    let store = Store::temporary().unwrap();
    store.put(trees::CACHE, "k", &candidate(1)).unwrap();
    let raw = store
        .raw_tree(trees::CACHE)
        .unwrap()
        .get("k")
        .unwrap()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(json["v"], 1);
    assert!(json["at"].as_i64().unwrap() > 0);
    assert_eq!(json["data"]["family"], "configs/nvidia-master.yaml:key-1");
}

#[test]
fn reserved_and_empty_names_are_refused() {
    let store = Store::temporary().unwrap();
    for tree in ["", "__sled__default", "__klaud_meta", trees::EVENTS] {
        let err = store.put(tree, "k", &candidate(1)).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidTree { .. }),
            "{tree:?}: {err}"
        );
    }
    let err = store.put(trees::CANDIDATES, "", &candidate(1)).unwrap_err();
    assert!(matches!(err, StoreError::EmptyKey { .. }), "{err}");
}

#[test]
fn update_is_a_compare_and_swap_under_concurrent_threads() {
    const THREADS: usize = 8;
    const INCREMENTS: usize = 200;
    let store = Store::temporary().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let store = store.clone();
            let calls = Arc::clone(&calls);
            std::thread::spawn(move || {
                for _ in 0..INCREMENTS {
                    store
                        .update::<Counter, _>(trees::CACHE, "counter", |current| {
                            calls.fetch_add(1, Ordering::Relaxed);
                            let value = current.map_or(0, |c| c.value);
                            Some(Counter { value: value + 1 })
                        })
                        .expect("update");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("updater thread");
    }
    let total = (THREADS * INCREMENTS) as u64;
    assert_eq!(
        store.get::<Counter>(trees::CACHE, "counter").unwrap(),
        Some(Counter { value: total })
    );
    // Every increment ran at least once; re-runs are allowed, lost updates not.
    assert!(calls.load(Ordering::Relaxed) >= THREADS * INCREMENTS);
}

#[test]
fn update_returning_none_removes_and_refusal_keeps() {
    let store = Store::temporary().unwrap();
    store.put(trees::CACHE, "c", &Counter { value: 5 }).unwrap();

    let refused = store
        .try_update::<Counter, _, _>(trees::CACHE, "c", |current| match current {
            Some(c) if c.value == 1 => Ok(Some(Counter { value: 2 })),
            other => Err(format!("expected 1, found {other:?}")),
        })
        .unwrap();
    assert_eq!(
        refused,
        Err("expected 1, found Some(Counter { value: 5 })".to_owned())
    );
    assert_eq!(
        store.get::<Counter>(trees::CACHE, "c").unwrap(),
        Some(Counter { value: 5 })
    );

    let written = store
        .update::<Counter, _>(trees::CACHE, "c", |_| None)
        .unwrap();
    assert_eq!(written, None);
    assert_eq!(store.get::<Counter>(trees::CACHE, "c").unwrap(), None);

    let created = store
        .update::<Counter, _>(trees::CACHE, "new", |current| {
            assert_eq!(current, None);
            Some(Counter { value: 1 })
        })
        .unwrap();
    assert_eq!(created, Some(Counter { value: 1 }));
}

#[test]
fn update_refuses_to_overwrite_an_undecodable_record() {
    let store = Store::temporary().unwrap();
    insert_raw(&store, trees::CACHE, b"c", b"\x00garbage");
    let err = store
        .update::<Counter, _>(trees::CACHE, "c", |_| Some(Counter { value: 1 }))
        .unwrap_err();
    assert!(matches!(err, StoreError::Decode { .. }), "{err}");
    let raw = store
        .raw_tree(trees::CACHE)
        .unwrap()
        .get("c")
        .unwrap()
        .unwrap();
    assert_eq!(&raw[..], b"\x00garbage");
}

#[test]
fn garbage_value_is_reported_with_its_tree_and_key() {
    let store = Store::temporary().unwrap();
    store
        .put(trees::CANDIDATES, "good-1", &candidate(1))
        .unwrap();
    insert_raw(&store, trees::CANDIDATES, b"bad-2", b"{not json");
    store
        .put(trees::CANDIDATES, "good-3", &candidate(3))
        .unwrap();

    let err = store
        .get::<Candidate>(trees::CANDIDATES, "bad-2")
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::Decode { .. }), "{message}");
    assert!(message.contains("\"bad-2\""), "{message}");
    assert!(message.contains("`candidates`"), "{message}");

    let err = store.list::<Candidate>(trees::CANDIDATES).unwrap_err();
    assert!(err.to_string().contains("\"bad-2\""), "{err}");

    let scanned = store.scan::<Candidate>(trees::CANDIDATES).unwrap();
    let keys: Vec<_> = scanned.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["bad-2", "good-1", "good-3"]);
    assert!(scanned[0].1.is_err());
    assert_eq!(scanned[1].1.as_ref().unwrap(), &candidate(1));
    assert_eq!(scanned[2].1.as_ref().unwrap(), &candidate(3));

    // An undecodable record can still be removed, unblocking `list`.
    assert!(store.remove(trees::CANDIDATES, "bad-2").unwrap());
    assert_eq!(store.list::<Candidate>(trees::CANDIDATES).unwrap().len(), 2);
}

#[test]
fn non_utf8_key_is_reported_in_hex() {
    let store = Store::temporary().unwrap();
    insert_raw(&store, trees::CACHE, b"\xff\xfe", b"{}");
    let err = store.list::<Counter>(trees::CACHE).unwrap_err();
    assert!(err.to_string().contains("0xfffe"), "{err}");
}

#[test]
fn wrong_shape_names_the_json_path() {
    let store = Store::temporary().unwrap();
    insert_raw(
        &store,
        trees::CANDIDATES,
        b"c",
        br#"{"v":1,"at":1,"data":{"family":"f","image":"i","attempts":"three"}}"#,
    );
    let err = store.get::<Candidate>(trees::CANDIDATES, "c").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("at `attempts`"), "{message}");
}

#[test]
fn newer_schema_version_is_an_error_not_garbage() {
    let store = Store::temporary().unwrap();
    store
        .put(
            trees::CANDIDATES,
            "c",
            &CandidateV2 {
                family: "f".into(),
                image: "i".into(),
                repairs: 2,
            },
        )
        .unwrap();
    let err = store.get::<Candidate>(trees::CANDIDATES, "c").unwrap_err();
    match &err {
        StoreError::NewerVersion {
            tree,
            key,
            found,
            supported,
        } => {
            assert_eq!((tree.as_str(), key.as_str()), ("candidates", "c"));
            assert_eq!((*found, *supported), (2, 1));
        }
        other => panic!("expected NewerVersion, got {other}"),
    }
    assert!(err.to_string().contains("schema version 2"), "{err}");
}

#[test]
fn older_schema_version_goes_through_upgrade() {
    let store = Store::temporary().unwrap();
    store.put(trees::CANDIDATES, "c", &candidate(4)).unwrap();
    let upgraded = store.get::<CandidateV2>(trees::CANDIDATES, "c").unwrap();
    assert_eq!(
        upgraded,
        Some(CandidateV2 {
            family: candidate(4).family,
            image: candidate(4).image,
            repairs: 4,
        })
    );

    insert_raw(
        &store,
        trees::CANDIDATES,
        b"old",
        br#"{"v":0,"at":1,"data":{}}"#,
    );
    let err = store
        .get::<CandidateV2>(trees::CANDIDATES, "old")
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot upgrade from schema version 0"),
        "{err}"
    );
}

#[test]
fn event_log_keeps_the_newest_entries() {
    let store = Store::temporary_with(StoreOptions { event_limit: 5 }).unwrap();
    let mut ids = Vec::new();
    for n in 0..12 {
        let mut event = Event::new(EventKind::Outcome, format!("event {n}"));
        event.candidate = Some(format!("cand-{n}"));
        ids.push(store.append_event(&event).unwrap());
    }
    let recent = store.recent_events(100).unwrap();
    let messages: Vec<_> = recent.iter().map(|e| e.event.message.as_str()).collect();
    assert_eq!(
        messages,
        ["event 11", "event 10", "event 9", "event 8", "event 7"]
    );
    assert_eq!(recent[0].id, ids[11]);
    assert_eq!(recent[0].event.candidate.as_deref(), Some("cand-11"));
    assert!(recent.windows(2).all(|w| w[0].at >= w[1].at));

    assert_eq!(store.recent_events(2).unwrap().len(), 2);
    assert_eq!(store.prune_events(2).unwrap(), 3);
    assert_eq!(store.recent_events(100).unwrap().len(), 2);
    assert_eq!(store.stats().unwrap().records.get(trees::EVENTS), Some(&2));
}

#[test]
fn undecodable_event_is_reported_with_its_id() {
    let store = Store::temporary().unwrap();
    store
        .append_event(&Event::new(EventKind::Error, "fine"))
        .unwrap();
    let bad = uuid::Uuid::now_v7();
    insert_raw(
        &store,
        trees::EVENTS,
        bad.as_bytes(),
        br#"{"v":1,"at":1,"data":{"kind":"nope","message":"x"}}"#,
    );
    let err = store.recent_events(10).unwrap_err();
    assert!(err.to_string().contains(&bad.to_string()), "{err}");
}

#[test]
fn prune_older_than_removes_only_old_records() {
    let store = Store::temporary().unwrap();
    store.put(trees::WAVES, "fresh", &candidate(1)).unwrap();
    let old = record::encode(trees::WAVES, "old", &candidate(2), 0).unwrap();
    insert_raw(&store, trees::WAVES, b"old", &old);
    insert_raw(&store, trees::WAVES, b"junk", b"junk");

    let report = store
        .prune_older_than(trees::WAVES, Duration::from_secs(24 * 3600))
        .unwrap();
    assert_eq!(
        report,
        PruneReport {
            removed: 1,
            undecodable: vec!["junk".to_owned()],
        }
    );
    let keys: BTreeSet<_> = store
        .scan::<Candidate>(trees::WAVES)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["fresh".to_owned(), "junk".to_owned()])
    );

    // A cutoff in the future takes everything with a readable envelope.
    let future = Utc.with_ymd_and_hms(2999, 1, 1, 0, 0, 0).unwrap();
    let report = store.prune_written_before(trees::WAVES, future).unwrap();
    assert_eq!(report.removed, 1);

    // The event log prunes by age too.
    store
        .append_event(&Event::new(EventKind::Info, "wave ran"))
        .unwrap();
    assert_eq!(
        store
            .prune_older_than(trees::EVENTS, Duration::from_secs(3600))
            .unwrap()
            .removed,
        0
    );
    assert_eq!(
        store
            .prune_written_before(trees::EVENTS, future)
            .unwrap()
            .removed,
        1
    );
    // An absurd age saturates instead of overflowing.
    assert_eq!(
        store
            .prune_older_than(trees::CACHE, Duration::MAX)
            .unwrap()
            .removed,
        0
    );
}

#[test]
fn stats_count_records_per_tree() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    store.put(trees::CANDIDATES, "a", &candidate(1)).unwrap();
    store.put(trees::CANDIDATES, "b", &candidate(2)).unwrap();
    store.put(trees::CACHE, "x", &Counter { value: 1 }).unwrap();
    store
        .append_event(&Event::new(EventKind::Info, "hello"))
        .unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(
        stats.path.as_deref(),
        Some(dir.path().join("store").as_path())
    );
    assert_eq!(stats.records.get(trees::CANDIDATES), Some(&2));
    assert_eq!(stats.records.get(trees::CACHE), Some(&1));
    assert_eq!(stats.records.get(trees::EVENTS), Some(&1));
    assert!(
        stats.records.keys().all(|name| !name.starts_with("__")),
        "{stats:?}"
    );
    assert!(stats.size_on_disk > 0);
}

#[tokio::test]
async fn reopen_after_drop_keeps_flushed_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let store = Store::open(&path).unwrap();
        store.put(trees::CANDIDATES, "c1", &candidate(1)).unwrap();
        store
            .append_event(&Event::new(EventKind::Outcome, "validated"))
            .unwrap();
        store.flush().await.unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.get::<Candidate>(trees::CANDIDATES, "c1").unwrap(),
        Some(candidate(1))
    );
    assert_eq!(
        store.recent_events(10).unwrap()[0].event.message,
        "validated"
    );
}

#[test]
fn second_open_of_the_same_path_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let first = Store::open(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains("another running Klaud instance"),
        "{message}"
    );
    drop(first);
    Store::open(&path).expect("the lock is released with the last handle");
}

#[test]
fn newer_store_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let store = Store::open(&path).unwrap();
        insert_raw(&store, META_TREE, FORMAT_KEY.as_bytes(), b"99");
        store.db.flush().unwrap();
    }
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedFormat { found: 99, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("rebuild its state from GitHub"),
        "{err}"
    );
}

#[test]
fn corrupt_store_says_it_can_be_deleted_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let store = Store::open(&path).unwrap();
        store.put(trees::CANDIDATES, "c", &candidate(1)).unwrap();
        store.db.flush().unwrap();
    }
    // A configuration block whose fields are garbage: what a torn write or a
    // stray editor leaves behind.
    std::fs::write(
        path.join("conf"),
        b"segment_size: lots\nuse_compression: maybe\n",
    )
    .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("delete the directory"), "{message}");
    assert!(
        message.contains("rebuild its state from GitHub"),
        "{message}"
    );
}

#[test]
fn debug_shows_the_path_only() {
    let store = Store::temporary().unwrap();
    let debug = format!("{store:?}");
    assert!(debug.starts_with("Store { path: None"), "{debug}");
}

/// Set in the child process of `crash_after_flush_keeps_flushed_data`.
const CRASH_CHILD_ENV: &str = "KLAUD_STORE_CRASH_CHILD_DIR";
const CRASH_CHILD_FLUSHED: &str = "crash-child: flushed";

/// Runs only as the child of `crash_after_flush_keeps_flushed_data`: writes,
/// flushes, and aborts the process without any destructor running.
#[tokio::test]
#[ignore = "child process of crash_after_flush_keeps_flushed_data"]
async fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_CHILD_ENV) else {
        panic!("{CRASH_CHILD_ENV} is not set; this test is run by its parent");
    };
    let store = Store::open(&dir).expect("child opens the store");
    for n in 0..50 {
        store
            .put(trees::CANDIDATES, &format!("c{n:02}"), &candidate(n))
            .expect("put");
    }
    store
        .update::<Counter, _>(trees::CACHE, "transitions", |_| Some(Counter { value: 7 }))
        .expect("update");
    store
        .append_event(&Event::new(EventKind::Outcome, "before the crash"))
        .expect("event");
    store.flush().await.expect("flush");
    println!("{CRASH_CHILD_FLUSHED}");
    std::process::abort();
}

#[test]
fn crash_after_flush_keeps_flushed_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let exe = std::env::current_exe().expect("test binary path");
    let output = std::process::Command::new(exe)
        .args([
            "--exact",
            "tests::crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_CHILD_ENV, &path)
        .output()
        .expect("spawn the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains(CRASH_CHILD_FLUSHED),
        "child did not reach its flush\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        !output.status.success(),
        "child was meant to abort: {:?}",
        output.status
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(output.status.signal(), Some(6), "SIGABRT expected");
    }

    let store = Store::open(&path).expect("reopen after the crash");
    let candidates = store.list::<Candidate>(trees::CANDIDATES).unwrap();
    assert_eq!(candidates.len(), 50);
    assert_eq!(candidates[49], ("c49".to_owned(), candidate(49)));
    assert_eq!(
        store.get::<Counter>(trees::CACHE, "transitions").unwrap(),
        Some(Counter { value: 7 })
    );
    assert_eq!(
        store.recent_events(1).unwrap()[0].event.message,
        "before the crash"
    );
}

/// sled recovers a damaged log by dropping everything after the first bad
/// segment, without an error; the store must not then pass for a fresh one.
#[test]
fn store_whose_log_was_wiped_is_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let store = Store::open(&path).unwrap();
        for n in 0..200 {
            store
                .put(trees::CANDIDATES, &format!("c{n}"), &candidate(n))
                .unwrap();
        }
        store.db.flush().unwrap();
    }
    let db_file = path.join("db");
    let mut bytes = std::fs::read(&db_file).unwrap();
    for byte in &mut bytes {
        *byte = byte.wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&db_file, &bytes).unwrap();

    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("delete the directory"), "{err}");

    // Deleting it, as the message says, gives a working empty store.
    std::fs::remove_dir_all(&path).unwrap();
    let store = Store::open(&path).unwrap();
    assert!(
        store
            .list::<Candidate>(trees::CANDIDATES)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_fresh_store_reopens_without_any_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::open(&path).unwrap());
    Store::open(&path).expect("an empty store is not mistaken for a wiped one");
}

/// The daemon shares one store across tokio tasks and flushes from them.
#[test]
fn store_and_flush_future_can_cross_threads() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}
    let store = Store::temporary().unwrap();
    assert_send_sync(&store);
    let flush = store.flush();
    assert_send(&flush);
    drop(flush);
}
