use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;

fn track(tag: &str) -> Track {
    infer_track(tag).unwrap_or_else(|| panic!("{tag} has no track"))
}

fn key(track: &Track, tag: &str) -> SortKey {
    track
        .matches(tag)
        .unwrap_or_else(|| panic!("{tag} is not on {track}"))
        .key
        .unwrap_or_else(|| panic!("{track} has no order"))
}

#[test]
fn inferred_track_names_and_orderings_follow_the_tag_shape() {
    let cases = [
        ("v0.25.0", "v<semver>", TrackOrdering::Semver),
        ("v0.5.16-cu130", "v<semver>-cu130", TrackOrdering::Semver),
        (
            "v0.5.16-cu130-runtime",
            "v<semver>-cu130-runtime",
            TrackOrdering::Semver,
        ),
        (
            "v0.5.8.post1-cu130-amd64",
            "v<semver>-cu130-amd64",
            TrackOrdering::Semver,
        ),
        ("1.3.0rc14", "<semver-pre>", TrackOrdering::Semver),
        ("1.3.0rc22.post1", "<semver-pre>", TrackOrdering::Semver),
        ("0.8.1.post2", "<semver>", TrackOrdering::Semver),
        (
            "v0.20.1-ubuntu2404",
            "v<semver>-ubuntu2404",
            TrackOrdering::Semver,
        ),
        (
            "v0.5.12-rocm700-mi35x",
            "v<semver>-rocm700-mi35x",
            TrackOrdering::Semver,
        ),
        (
            "v0.5.17-rocm720-mi35x-20260817",
            "v<semver>-rocm720-mi35x-<yyyymmdd>",
            TrackOrdering::Semver,
        ),
        (
            "nightly-dev-cu13-20260815-a5ba081f",
            "nightly-dev-cu13-<yyyymmdd>-<commit>",
            TrackOrdering::Date,
        ),
        (
            "nightly-dev-20260527-14f81a67",
            "nightly-dev-<yyyymmdd>-<commit>",
            TrackOrdering::Date,
        ),
        (
            "nightly-09663abde0f50944a8d5ea30120666024b503faa",
            "nightly-<commit>",
            TrackOrdering::Pushed,
        ),
        (
            "nightly-dev-x86_64-cu13.0.1-426e59f",
            "nightly-dev-x86_64-cu13.0.1-<commit>",
            TrackOrdering::Pushed,
        ),
        (
            "nightly-dev-arm64-cu13.0.1-75c2eef",
            "nightly-dev-arm64-cu13.0.1-<commit>",
            TrackOrdering::Pushed,
        ),
        (
            "vllm-x86_64-cu13-0.25.1-7a33ba9",
            "vllm-x86_64-cu13-<semver>-<commit>",
            TrackOrdering::Semver,
        ),
        (
            "nightly_202606101403",
            "nightly_<yyyymmddhhmm>",
            TrackOrdering::Date,
        ),
        (
            "dev-nightly-0820",
            "dev-nightly-<mmdd>",
            TrackOrdering::Date,
        ),
        ("0.1.5", "<semver>", TrackOrdering::Semver),
        (
            "1.3.0-deepseek-v4-dev.1",
            "<semver>-deepseek-v4-dev.<n>",
            TrackOrdering::Semver,
        ),
        (
            "1.3.0-dev.1-cuda13",
            "<semver>-dev.<n>-cuda13",
            TrackOrdering::Semver,
        ),
        (
            "feat-deepseek_v4-c185066",
            "feat-deepseek_v4-<commit>",
            TrackOrdering::Pushed,
        ),
        (
            "dsv4-megamoe-mxfp4-arm64-cu130-4ba0a72",
            "dsv4-megamoe-mxfp4-arm64-cu130-<commit>",
            TrackOrdering::Pushed,
        ),
        (
            "sglang-0.5.9-rocm720-mi35x-mori-0227-2",
            "sglang-<semver>-rocm720-mi35x-mori-<mmdd>-<n>",
            TrackOrdering::Semver,
        ),
        (
            "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511",
            "rocm<rocm>_ubuntu24.04_py<py>_pytorch_release_<pytorch>_atom<yyyymmdd>",
            TrackOrdering::Date,
        ),
        (
            "ubuntu24.04_py3.12_pytorch_release_2.10.0_glm52_agentic_0813",
            "ubuntu24.04_py<py>_pytorch_release_<pytorch>_glm52_agentic_<mmdd>",
            TrackOrdering::Date,
        ),
        (
            "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom0.1.3",
            "rocm<rocm>_ubuntu24.04_py<py>_pytorch_release_<pytorch>_atom<semver>",
            TrackOrdering::Semver,
        ),
        ("vllm0.26", "vllm<semver>", TrackOrdering::Semver),
        ("vllm0.27rc1", "vllm<semver-pre>", TrackOrdering::Semver),
    ];
    for (tag, name, ordering) in cases {
        let t = track(tag);
        assert_eq!((t.name(), t.ordering()), (name, ordering), "{tag}");
        assert_eq!(t.source(), TrackSource::Inferred);
    }
}

#[test]
fn tags_without_a_recognisable_order_have_no_track() {
    for tag in [
        "kimi-k3",
        "deepseek-v4-hopper",
        "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom2026051",
        "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20261311",
        "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_at0m20260511",
        "dev.1",
        "nightly-dev.1",
        "1.3.0-dev.1-dev.2",
        "0.5.9-0227-2-3",
        "feat-c185066-2",
        "latest",
        // A toolchain's version names what the build is for, not its order.
        "py3.12",
        "v0.5.8-cuda12.8",
        "ubuntu24.04_cuda12.8",
        "Vllm0.26",
        "",
        "v1.2.3-v1.2.4",
        "nightly-20260101-20260102",
        "nightly-a5ba081f-14f81a67",
        "v0.5.9-20261341",
    ] {
        assert_eq!(
            infer_track(tag).map(|t| t.name().to_owned()),
            None,
            "{tag:?}"
        );
    }
}

#[test]
fn a_product_version_at_the_end_orders_the_build_across_its_bases() {
    let t = track("rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom0.1.3");
    let tag =
        |atom: &str| format!("rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom{atom}");
    assert!(key(&t, &tag("0.1.3")) < key(&t, &tag("0.1.4")));
    assert!(key(&t, &tag("0.1.4")) < key(&t, &tag("0.2.0")));
    assert!(key(&t, &tag("0.1.3")) < key(&t, &tag("0.1.3.post1")));
    assert_eq!(t.base_names(), ["ROCm", "Python", "PyTorch"]);
    // The product's version comes first, whatever the base: a newer ROCm
    // build of the same ATOM is newer, an older ATOM on a newer ROCm is not.
    let on = |rocm: &str, atom: &str| {
        format!("rocm{rocm}_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom{atom}")
    };
    assert!(key(&t, &on("7.2.4", "0.1.3")) < key(&t, &on("7.3.1", "0.1.3")));
    assert!(key(&t, &on("7.2.5", "0.1.3")) < key(&t, &on("7.3.1", "0.1.3")));
    assert!(key(&t, &on("7.3.1", "0.1.3")) < key(&t, &on("7.2.4", "0.1.4")));
    assert!(
        key(&t, &on("7.2.4", "0.1.4"))
            < key(
                &t,
                "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.11.0_atom0.1.4"
            )
    );
    for other in [
        "rocm7.2.4_ubuntu22.04_py3.12_pytorch_release_2.10.0_atom0.1.4",
        "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom0.1.4rc1",
        "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511",
        "rocm7.2.4_ubuntu24.04_py3.12_pytorch_nightly_2.10.0_atom0.1.4",
    ] {
        assert_eq!(t.matches(other), None, "{other}");
    }
}

#[test]
fn dated_builds_on_a_base_are_ordered_by_date_across_bases() {
    let t = track("rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511");
    let on = |rocm: &str, date: &str| {
        format!("rocm{rocm}_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom{date}")
    };
    // The ROCm 7.2.4 build of May 31 is newer than the 7.2.3 one of May 19.
    assert!(key(&t, &on("7.2.3", "20260519")) < key(&t, &on("7.2.4", "20260531")));
    assert!(key(&t, &on("7.2.3", "20260511")) < key(&t, &on("7.2.3", "20260519")));
    // The same day on a newer base breaks the tie.
    assert!(key(&t, &on("7.2.3", "20260531")) < key(&t, &on("7.2.4", "20260531")));
    assert_eq!(
        base_changes(&on("7.2.3", "20260511"), &on("7.2.4", "20260531")),
        [BaseChange {
            name: "ROCm",
            from: "7.2.3".into(),
            to: "7.2.4".into()
        }]
    );
    assert_eq!(
        base_change_sentence(&on("7.2.3", "20260511"), &on("7.2.4", "20260531")).as_deref(),
        Some("also moves ROCm 7.2.3 → 7.2.4")
    );
    assert_eq!(
        base_change_sentence(&on("7.2.3", "20260511"), &on("7.2.3", "20260519")),
        None
    );
    // A nightly stream keeps its CUDA: its text does not order it.
    let nightly = track("nightly-dev-arm64-cu13.0.1-75c2eef");
    assert!(nightly.base_names().is_empty());
    assert_eq!(nightly.matches("nightly-dev-arm64-cu13.0.2-75c2eef"), None);
}

#[test]
fn an_unnumbered_post_release_is_ordered_as_post0() {
    let t = track("rocm7.2.2_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom0.1.2.post");
    assert_eq!(
        t.name(),
        "rocm<rocm>_ubuntu24.04_py<py>_pytorch_release_<pytorch>_atom<semver>"
    );
    let on = |rocm: &str, atom: &str| {
        format!("rocm{rocm}_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom{atom}")
    };
    assert!(key(&t, &on("7.2.2", "0.1.2")) < key(&t, &on("7.2.2", "0.1.2.post")));
    assert!(key(&t, &on("7.2.2", "0.1.2.post")) < key(&t, &on("7.2.2", "0.1.2.post1")));
    assert!(key(&t, &on("7.2.2", "0.1.2.post")) < key(&t, &on("7.2.4", "0.1.3")));
}

#[test]
fn semver_orders_numerically_with_prereleases_before_and_posts_after() {
    let t = track("v0.5.16-cu130");
    assert!(
        key(&t, "v0.5.9-cu130") < key(&t, "v0.5.16-cu130"),
        "numeric, not lexical"
    );
    assert!(key(&t, "v0.5.8-cu130") < key(&t, "v0.5.8.post1-cu130"));
    assert!(key(&t, "v0.5.8.post1-cu130") < key(&t, "v0.5.9-cu130"));
    assert_eq!(key(&t, "v0.26-cu130"), key(&t, "v0.26.0-cu130"));

    let trt = track("1.3.0rc14");
    let ordered = [
        "1.3.0rc9",
        "1.3.0rc14",
        "1.3.0rc22",
        "1.3.0rc22.post1",
        "1.3.0rc23",
        "1.3.0",
        "1.3.0.post1",
        "1.3.1rc1",
    ];
    for pair in ordered.windows(2) {
        assert!(
            key(&trt, pair[0]) < key(&trt, pair[1]),
            "{} < {}",
            pair[0],
            pair[1]
        );
    }
    assert!(Version::parse("1.3.0rc14").is_some_and(|v| v.is_prerelease()));
    assert!(Version::parse("1.3.0").is_some_and(|v| !v.is_prerelease()));
}

#[test]
fn malformed_versions_do_not_parse() {
    for bad in [
        "",
        "v",
        "1",
        "1.",
        "1..2",
        ".1.2",
        "1.2.3.4.5",
        "1.2rc",
        "1.2.post",
        "1.2.3-rc1",
        "vv1.2",
        "1.2c1",
        "1.2.3.post1.post2",
        "1234567890.1",
    ] {
        assert_eq!(Version::parse(bad), None, "{bad:?}");
    }
    for good in [
        "0.1",
        "v1.2.3",
        "1.2.3.4",
        "1.3.0rc22.post1",
        "2.0a1",
        "2.0b3",
        "999999999.0",
    ] {
        assert!(Version::parse(good).is_some(), "{good:?}");
    }
}

#[test]
fn version_then_date_orders_rocm_builds() {
    let t = track("v0.5.17-rocm720-mi35x-20260817");
    let ordered = [
        "v0.5.14-rocm720-mi35x-20260708",
        "v0.5.16-rocm720-mi35x-20260726",
        "v0.5.16-rocm720-mi35x-20260730",
        "v0.5.17-rocm720-mi35x-20260813",
        "v0.5.17-rocm720-mi35x-20260817",
    ];
    for pair in ordered.windows(2) {
        assert!(
            key(&t, pair[0]) < key(&t, pair[1]),
            "{} < {}",
            pair[0],
            pair[1]
        );
    }
    assert_eq!(
        t.matches("v0.5.18-rocm720-mi35x-20261301"),
        None,
        "month 13 is not a date"
    );
}

#[test]
fn date_tracks_order_by_date_and_time_and_carry_the_commit() {
    let t = track("nightly-dev-cu13-20260815-a5ba081f");
    let newer = t.matches("nightly-dev-cu13-20260901-0123abcd").unwrap();
    assert!(key(&t, "nightly-dev-cu13-20260815-a5ba081f") < newer.key.unwrap());
    assert_eq!(newer.commit.as_deref(), Some("0123abcd"));

    let atom = track("nightly_202606101403");
    assert!(key(&atom, "nightly_202606101403") < key(&atom, "nightly_202607231538"));
    assert!(key(&atom, "nightly_202607231538") < key(&atom, "nightly_202607231539"));
    assert_eq!(atom.matches("nightly_202607232460"), None);
}

#[test]
fn pushed_tracks_have_no_key_but_carry_the_commit() {
    let t = track("nightly-09663abde0f50944a8d5ea30120666024b503faa");
    let p = t
        .matches("nightly-cb8104839c141609d99f1254459ef3a4f1bd4263")
        .unwrap();
    assert_eq!(p.key, None);
    assert_eq!(
        p.commit.as_deref(),
        Some("cb8104839c141609d99f1254459ef3a4f1bd4263")
    );
    assert_eq!(
        t.matches("nightly-cb8104839c"),
        None,
        "another commit length is another track"
    );
    let feature = track("feat-deepseek_v4-c185066");
    assert_eq!(feature.ordering(), TrackOrdering::Pushed);
    assert!(feature.matches("feat-deepseek_v4-1a2b3c4").is_some());
    assert_eq!(
        feature.matches("feat-deepseek_v5-1a2b3c4"),
        None,
        "another prefix is another feature"
    );
    assert_eq!(feature.matches("feat-deepseek_v4-1a2b3c4d"), None);
}

fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

#[test]
fn year_less_dates_take_the_year_from_the_image_time() {
    let t = track("dev-nightly-0820");
    assert!(t.needs_time_for_key() && !t.ties_by_time());
    let p = t.matches("dev-nightly-1231").unwrap();
    assert_eq!(p.month_day, Some((12, 31)));
    assert!(p.needs_time_for_key());
    let date = |p: &TagPosition, time| p.key_at(at(time)).unwrap().date.unwrap().date();
    // Built on New Year's Day: the tag's December 31 is last year's.
    assert_eq!(
        date(&p, "2027-01-01T08:00:00Z"),
        NaiveDate::from_ymd_opt(2026, 12, 31).unwrap()
    );
    assert_eq!(
        date(&p, "2026-12-31T23:00:00Z"),
        NaiveDate::from_ymd_opt(2026, 12, 31).unwrap()
    );
    // A push a day before the tag's date (time zones) keeps the year.
    let early = t.matches("dev-nightly-0101").unwrap();
    assert_eq!(
        date(&early, "2026-12-31T20:00:00Z"),
        NaiveDate::from_ymd_opt(2027, 1, 1).unwrap()
    );
    let leap = t.matches("dev-nightly-0229").unwrap();
    assert_eq!(
        date(&leap, "2027-03-02T00:00:00Z"),
        NaiveDate::from_ymd_opt(2024, 2, 29).unwrap()
    );
    assert_eq!(t.matches("dev-nightly-1332"), None, "not a date");
    // The build counter after the date orders builds of one day.
    let mori = track("sglang-0.5.9-rocm720-mi35x-mori-0227-2");
    let key = |tag: &str, time: &str| mori.matches(tag).unwrap().key_at(at(time)).unwrap();
    let feb = "2026-02-28T00:00:00Z";
    assert!(
        key("sglang-0.5.9-rocm720-mi35x-mori-0227-3", feb)
            > key("sglang-0.5.9-rocm720-mi35x-mori-0227-2", feb)
    );
    assert!(
        key(
            "sglang-0.5.9-rocm720-mi35x-mori-0305-1",
            "2026-03-06T00:00:00Z"
        ) > key("sglang-0.5.9-rocm720-mi35x-mori-0227-9", feb)
    );
    assert!(
        key(
            "sglang-0.5.10-rocm720-mi35x-mori-0101-1",
            "2026-01-02T00:00:00Z"
        ) > key("sglang-0.5.9-rocm720-mi35x-mori-0227-9", feb)
    );
    assert_eq!(mori.matches("sglang-0.5.9-rocm720-mi35x-mori-0227"), None);
}

#[test]
fn dev_prereleases_order_by_version_then_dev_number() {
    for (current, newer, older) in [
        (
            "1.3.0-deepseek-v4-dev.1",
            [
                "1.3.0-deepseek-v4-dev.2",
                "1.3.0-deepseek-v4-dev.10",
                "1.3.1-deepseek-v4-dev.1",
            ],
            [
                "1.2.9-deepseek-v4-dev.7",
                "1.3.0-deepseek-v4-dev.0",
                "1.2.0-deepseek-v4-dev.99",
            ],
        ),
        (
            "1.3.0-dev.1-cuda13",
            [
                "1.3.0-dev.2-cuda13",
                "1.3.0-dev.11-cuda13",
                "1.4.0-dev.1-cuda13",
            ],
            [
                "1.2.0-dev.5-cuda13",
                "1.3.0-dev.0-cuda13",
                "0.9.0-dev.1-cuda13",
            ],
        ),
    ] {
        let t = track(current);
        let base = key(&t, current);
        for tag in newer {
            assert!(key(&t, tag) > base, "{tag} after {current}");
        }
        for tag in older {
            assert!(key(&t, tag) < base, "{tag} before {current}");
        }
    }
    let t = track("1.3.0-dev.1-cuda13");
    for other in [
        "1.3.0-dev.1-cuda12",
        "1.3.0-cuda13",
        "1.3.0rc1-dev.1-cuda13",
        "1.3.0-dev.x-cuda13",
    ] {
        assert_eq!(t.matches(other), None, "{other}");
    }
}

#[test]
fn versions_with_a_commit_tie_by_time() {
    let t = track("vllm-x86_64-cu13-0.25.1-7a33ba9");
    assert!(t.ties_by_time() && !t.needs_time_for_key());
    assert_eq!(
        key(&t, "vllm-x86_64-cu13-0.25.1-1234abc"),
        key(&t, "vllm-x86_64-cu13-0.25.1-7a33ba9"),
        "rebuilds of one version have one text key; the clock orders them"
    );
    assert!(
        key(&t, "vllm-x86_64-cu13-0.25.2-1234abc") > key(&t, "vllm-x86_64-cu13-0.25.1-7a33ba9")
    );
    assert!(track("nightly-dev-cu13-20260815-a5ba081f").ties_by_time());
    assert!(!track("v0.5.16-cu130").ties_by_time());
    assert!(!track("nightly-09663abde0f50944a8d5ea30120666024b503faa").ties_by_time());
}

#[test]
fn tracks_never_mix_builds() {
    let rejections = [
        (
            "v0.5.16-cu130",
            &[
                "v0.5.17-cu130-runtime",
                "v0.5.17-cu130-amd64",
                "v0.5.17-cu129",
                "v0.5.17",
                "v0.5.17-rocm720-mi35x",
                "0.5.17-cu130",
                "v0.5.17-CU130",
            ][..],
        ),
        (
            "v0.25.0",
            &[
                "v0.25.1-ubuntu2404",
                "0.25.1",
                "v0.25.1-cu130",
                "vllm-x86_64-cu13-0.25.1-7a33ba9",
            ],
        ),
        (
            "v0.5.17-rocm720-mi35x-20260817",
            &[
                "v0.5.17-rocm720-mi30x-20260817",
                "v0.5.17-rocm700-mi35x-20260817",
                "v0.5.17-rocm720-mi35x",
            ],
        ),
        (
            "v0.5.12-rocm700-mi35x",
            &["v0.5.12-rocm700-mi30x", "v0.5.12-rocm720-mi35x"],
        ),
        (
            "nightly-dev-cu13-20260815-a5ba081f",
            &[
                "nightly-dev-20260818-c0b6474b",
                "nightly-dev-cu12-20260818-c0b6474b",
            ],
        ),
        (
            "nightly-dev-x86_64-cu13.0.1-426e59f",
            &[
                "nightly-dev-arm64-cu13.0.1-75c2eef",
                "nightly-dev-x86_64-cu12.9.1-426e59f",
                "nightly-dev-x86_64-cu1301-426e59f",
            ],
        ),
        (
            "nightly-3ee2df30337a301164c46ae444b76ee67e71c106",
            &[
                "nightly-dev-x86_64-cu13.0.1-426e59f",
                "nightly-dev-cu13-20260815-a5ba081f",
            ],
        ),
        ("1.3.0rc14", &["1.3.0-dev.1-cuda13", "v1.3.0"]),
        ("v0.25.0", &["v0.26.0rc1", "v0.26.0b2"]),
    ];
    for (current, others) in rejections {
        let t = track(current);
        for other in others {
            assert_eq!(
                t.matches(other),
                None,
                "{other} must not be on the track of {current} ({t})"
            );
            if let Some(theirs) = infer_track(other) {
                assert_ne!(theirs, t, "{other} inferred onto the track of {current}");
            }
        }
    }
}

#[test]
fn commit_matches_is_a_case_insensitive_prefix_of_at_least_seven() {
    let full = "426E59F0123456789abcdef0123456789abcdef0";
    assert!(commit_matches("426e59f", full));
    assert!(commit_matches(
        "426e59f0",
        "426e59f0123456789abcdef0123456789abcdef0\n"
    ));
    assert!(commit_matches(&full.to_lowercase(), full));
    assert!(!commit_matches("426e59e", full));
    assert!(!commit_matches("426e5", full), "too short to mean anything");
    assert!(!commit_matches("", full));
    assert!(!commit_matches("426e59f", "426e59"));
    assert!(!commit_matches("426e59f", ""));
    assert!(!commit_matches("426e59g", "426e59g0"));
}

#[test]
fn configured_rules_override_inference_and_validate() {
    let rule = TrackRule::new(
        "rocm/atom",
        r"rocm7\.2\.[0-9]+_ubuntu24\.04_py3\.12_pytorch_release_2\.10\.0_atom(?P<date>[0-9]{8})",
        TrackOrdering::Date,
    )
    .unwrap();
    let tag = "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511";
    // Inference lets every base move; the rule lets only ROCm's patch move.
    assert_eq!(
        infer_track(tag).map(|t| t.name().to_owned()).as_deref(),
        Some("rocm<rocm>_ubuntu24.04_py<py>_pytorch_release_<pytorch>_atom<yyyymmdd>")
    );
    let t = track_for("rocm/atom", tag, std::slice::from_ref(&rule))
        .unwrap()
        .unwrap();
    assert_eq!(t.source(), TrackSource::Configured);
    assert!(
        key(&t, tag)
            < key(
                &t,
                "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260601"
            )
    );
    // Another repository's tag of the same shape gets the inferred track.
    assert_eq!(
        track_for("rocm/other", tag, std::slice::from_ref(&rule))
            .unwrap()
            .map(|t| t.source()),
        Some(TrackSource::Inferred)
    );
    // Tags the rule does not match fall back to inference.
    let fallback = track_for("rocm/atom", "v1.2.3", std::slice::from_ref(&rule))
        .unwrap()
        .unwrap();
    assert_eq!(fallback.name(), "v<semver>");

    let numeric = TrackRule::new("r", r"build-(?P<number>[0-9]+)", TrackOrdering::Numeric).unwrap();
    let t = track_for("r", "build-9", std::slice::from_ref(&numeric))
        .unwrap()
        .unwrap();
    assert!(key(&t, "build-9") < key(&t, "build-10"));
    assert_eq!(t.matches("build-9x"), None, "rules are anchored");

    let pushed = TrackRule::new("r", r"kimi-k3", TrackOrdering::Pushed).unwrap();
    let t = track_for("r", "kimi-k3", std::slice::from_ref(&pushed))
        .unwrap()
        .unwrap();
    assert_eq!(t.matches("kimi-k3").unwrap().key, None);
}

#[test]
fn configured_rule_errors_are_clear() {
    let e = TrackRule::new("r", "v(?P<version>[0-9.]+", TrackOrdering::Semver).unwrap_err();
    assert!(matches!(e, TrackError::InvalidRegex { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("track rule for r: regex \"v(?P<version>[0-9.]+\" is invalid"),
        "{e}"
    );
    let e = TrackRule::new("r", "nightly-(?P<commit>[0-9a-f]+)", TrackOrdering::Date).unwrap_err();
    assert_eq!(
        e.to_string(),
        "track rule for r: ordering `date` needs a named capture (?P<date>...) in regex \"nightly-(?P<commit>[0-9a-f]+)\""
    );
    let e = TrackRule::new("r", "(?P<build>[0-9]+)", TrackOrdering::Pushed).unwrap_err();
    assert!(
        matches!(e, TrackError::UnknownCapture { ref capture, .. } if capture == "build"),
        "{e}"
    );
    assert!(matches!(
        TrackRule::new(" ", "x", TrackOrdering::Pushed),
        Err(TrackError::EmptyRepository(_))
    ));
    let e = TrackRule::new("r", "a{1000}{1000}{1000}", TrackOrdering::Pushed).unwrap_err();
    assert!(matches!(e, TrackError::InvalidRegex { .. }), "{e}");
    assert_eq!(
        "weekly".parse::<TrackOrdering>().unwrap_err(),
        TrackError::UnknownOrdering("weekly".into())
    );
    assert_eq!(
        "date".parse::<TrackOrdering>().unwrap(),
        TrackOrdering::Date
    );

    let rule = TrackRule::new("r", r"v(?P<version>[0-9a-z.]+)", TrackOrdering::Semver).unwrap();
    let e = track_for("r", "vbanana", std::slice::from_ref(&rule)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "track rule for r (\"v(?P<version>[0-9a-z.]+)\") matched tag \"vbanana\", but its `version` capture \"banana\" is not a version like 1.2.3, 1.3.0rc14 or 0.5.8.post1"
    );
}

#[test]
fn hostile_tags_do_not_panic() {
    let long = "v1.2.3-".repeat(100);
    assert_eq!(infer_track(&long), None);
    let t = track("v1.2.3");
    assert_eq!(t.matches(&format!("v1.2.{}", "9".repeat(200))), None);
    assert_eq!(t.matches("v99999999999.1"), None);
    for tag in [
        "-",
        "_",
        "--",
        "x86_64",
        "ä-1.2.3",
        "1.2.3-ä",
        "nightly-",
        "-nightly-0820",
        "v1.2.3\n",
    ] {
        if let Some(t) = infer_track(tag) {
            assert!(t.matches(tag).is_some(), "{tag:?}");
        }
    }
}

/// Shared fixtures live next to the repository, never inside it.
fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "fixtures missing at {}",
        dir.display()
    );
    eprintln!(
        "SKIP: InferenceX fixtures not found at {}; tag-track fixture test did not run",
        dir.display()
    );
    None
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Tags of every `image:` / `container:` value, found line by line (the
/// typed YAML reader lives elsewhere; this test only needs the spellings).
fn fixture_tags(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    yaml_files(&root.join("configs"), &mut files);
    yaml_files(&root.join("benchmarks"), &mut files);
    // Block and flow style (`{ image: x }`), quoted or not.
    let value = Regex::new(r#"(?:^|[\s{,])(?:image|container):\s*["']?([^\s"',}]+)"#).unwrap();
    let mut tags = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for caps in text.lines().filter_map(|line| value.captures(line)) {
            let image = caps[1].split('@').next().unwrap_or("");
            let last = image.rsplit(['/', '#']).next().unwrap_or("");
            if let Some((_, tag)) = last.split_once(':') {
                tags.insert(tag.to_owned());
            }
        }
    }
    tags
}

#[test]
fn every_fixture_tag_is_on_its_own_track_or_has_none() {
    let Some(root) = fixtures() else { return };
    let tags = fixture_tags(&root);
    assert!(tags.len() > 80, "found only {} tags", tags.len());
    let mut none = BTreeSet::new();
    for tag in &tags {
        match infer_track(tag) {
            Some(t) => assert!(
                t.matches(tag).is_some(),
                "{tag} is not on its own track {t}"
            ),
            None => {
                none.insert(tag.as_str());
            }
        }
    }
    let expected: BTreeSet<&str> = ["deepseek-v4-hopper", "kimi-k3", "minimax-m3"]
        .into_iter()
        .collect();
    assert_eq!(none, expected);
}

#[derive(Debug, Clone)]
struct GenVersion {
    release: Vec<u64>,
    pre: Option<(u8, u64)>,
    post: Option<u64>,
}

impl GenVersion {
    fn render(&self) -> String {
        let mut s = self
            .release
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(".");
        if let Some((kind, n)) = self.pre {
            s.push_str(["a", "b", "rc"][usize::from(kind)]);
            s.push_str(&n.to_string());
        }
        if let Some(n) = self.post {
            s.push_str(&format!(".post{n}"));
        }
        s
    }

    /// The reference order, written independently of `Version`.
    fn reference_cmp(&self, other: &Self) -> Ordering {
        let n = self.release.len().max(other.release.len());
        let pad = |v: &[u64]| {
            (0..n)
                .map(|i| v.get(i).copied().unwrap_or(0))
                .collect::<Vec<_>>()
        };
        let pre_rank = |p: Option<(u8, u64)>| p.map_or((3, 0), |(k, n)| (k, n));
        pad(&self.release)
            .cmp(&pad(&other.release))
            .then(pre_rank(self.pre).cmp(&pre_rank(other.pre)))
            .then(self.post.cmp(&other.post))
    }
}

fn gen_version() -> impl Strategy<Value = GenVersion> {
    (
        prop::collection::vec(0u64..30, 2..=4),
        prop::option::of((0u8..3, 0u64..30)),
        prop::option::of(0u64..5),
    )
        .prop_map(|(release, pre, post)| GenVersion { release, pre, post })
}

proptest! {
    #[test]
    fn semver_ordering_is_total_and_matches_version_numbers(
        versions in prop::collection::vec(gen_version(), 2..12),
    ) {
        let t = track("v0.5.16rc1-cu130");
        let keyed: Vec<(GenVersion, SortKey)> = versions
            .into_iter()
            .map(|g| {
                let tag = format!("v{}-cu130", g.render());
                let k = key(&t, &tag);
                (g, k)
            })
            .collect();
        for (a, ka) in &keyed {
            for (b, kb) in &keyed {
                prop_assert_eq!(ka.cmp(kb), a.reference_cmp(b), "{} vs {}", a.render(), b.render());
                prop_assert_eq!(ka == kb, ka.cmp(kb).is_eq());
            }
        }
        let mut sorted = keyed.clone();
        sorted.sort_by(|x, y| x.1.cmp(&y.1));
        for pair in sorted.windows(2) {
            prop_assert!(pair[0].0.reference_cmp(&pair[1].0).is_le());
        }
    }

    #[test]
    fn date_ordering_is_chronological(
        a in (2000i32..2100, 1u32..13, 1u32..29, 0u32..24, 0u32..60),
        b in (2000i32..2100, 1u32..13, 1u32..29, 0u32..24, 0u32..60),
    ) {
        let t = track("nightly_202606101403");
        let tag = |(y, m, d, h, min): (i32, u32, u32, u32, u32)| format!("nightly_{y:04}{m:02}{d:02}{h:02}{min:02}");
        prop_assert_eq!(key(&t, &tag(a)).cmp(&key(&t, &tag(b))), a.cmp(&b));
    }

    #[test]
    fn dev_numbers_order_after_the_version(
        a in (prop::collection::vec(0u64..20, 3), 0u64..40),
        b in (prop::collection::vec(0u64..20, 3), 0u64..40),
        word in prop::sample::select(vec!["deepseek-v4-dev", "dev"]),
    ) {
        let render = |(v, n): &(Vec<u64>, u64)| {
            let version = format!("{}.{}.{}", v[0], v[1], v[2]);
            if word == "dev" { format!("{version}-dev.{n}-cuda13") } else { format!("{version}-{word}.{n}") }
        };
        let t = track(&render(&a));
        // Trailing zeros are insignificant, as in `Version`.
        let norm = |(v, n): &(Vec<u64>, u64)| (v.clone(), *n);
        prop_assert_eq!(key(&t, &render(&a)).cmp(&key(&t, &render(&b))), norm(&a).cmp(&norm(&b)));
    }

    #[test]
    fn year_less_dates_order_like_the_dates_they_stand_for(
        a in (0i64..3000, 0i64..3),
        b in (0i64..3000, 0i64..3),
        counters in (1u32..20, 1u32..20),
    ) {
        // Images made 0–2 days after the tag's date, over about eight years.
        let epoch = chrono::NaiveDate::from_ymd_opt(2022, 1, 1).unwrap();
        let day = |d: i64| epoch + chrono::Duration::days(d);
        let t = track("sglang-0.5.9-rocm720-mi35x-mori-0227-2");
        let tag = |d: chrono::NaiveDate, n: u32| format!("sglang-0.5.9-rocm720-mi35x-mori-{}-{n}", d.format("%m%d"));
        let made = |d: chrono::NaiveDate, late: i64| (d + chrono::Duration::days(late)).and_hms_opt(12, 0, 0).unwrap().and_utc();
        let (da, db) = (day(a.0), day(b.0));
        let ka = t.matches(&tag(da, counters.0)).unwrap().key_at(made(da, a.1)).unwrap();
        let kb = t.matches(&tag(db, counters.1)).unwrap().key_at(made(db, b.1)).unwrap();
        prop_assert_eq!(ka.date.map(|d| d.date()), Some(da));
        prop_assert_eq!(ka.cmp(&kb), (da, counters.0).cmp(&(db, counters.1)));
    }

    #[test]
    fn builds_of_one_version_share_a_key_and_versions_order_them(
        a in (prop::collection::vec(0u64..20, 3), "[0-9a-f]{6}"),
        b in (prop::collection::vec(0u64..20, 3), "[0-9a-f]{6}"),
    ) {
        // A leading digit and letter keep the token a commit.
        let render = |(v, c): &(Vec<u64>, String)| format!("vllm-x86_64-cu13-{}.{}.{}-a{c}", v[0], v[1], v[2]);
        let t = track("vllm-x86_64-cu13-0.25.1-7a33ba9");
        let (pa, pb) = (t.matches(&render(&a)).unwrap(), t.matches(&render(&b)).unwrap());
        prop_assert_eq!(pa.key.cmp(&pb.key), a.0.cmp(&b.0));
        prop_assert_eq!(pa.commit, Some(format!("a{}", a.1)));
    }

    #[test]
    fn inference_never_panics_and_tags_sit_on_their_own_track(tag in "[a-z0-9._-]{0,40}") {
        if let Some(t) = infer_track(&tag) {
            prop_assert!(t.matches(&tag).is_some());
        }
    }
}

#[test]
#[ignore = "prints the inferred track of every fixture tag"]
fn print_fixture_tracks() {
    let Some(root) = fixtures() else { return };
    for tag in fixture_tags(&root) {
        println!(
            "{tag:70} {}",
            infer_track(&tag).map_or("-".to_owned(), |t| t.to_string())
        );
    }
}
