use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

const NOW: &str = "2026-09-01T12:00:00Z";

fn family(host: &str, repository: &str, tag: &str, architecture: &str) -> FloorFamily {
    FloorFamily {
        host: host.to_owned(),
        repository: repository.to_owned(),
        tag: Some(tag.to_owned()),
        pinned: false,
        architecture: architecture.to_owned(),
    }
}

fn scenario(
    families: Vec<FloorFamily>,
    repositories: Vec<(&str, &str, RepositoryFacts)>,
) -> Scenario {
    Scenario {
        now: at(NOW),
        min_age: Duration::hours(24),
        rules: Vec::new(),
        families,
        repositories: repositories
            .into_iter()
            .map(|(h, r, f)| ((h.to_owned(), r.to_owned()), f))
            .collect(),
    }
}

fn listed(tags: &[&str], push_times: bool, facts: &[(&str, TagFacts)]) -> RepositoryFacts {
    RepositoryFacts {
        tags: Some(tags.iter().map(|t| (*t).to_owned()).collect()),
        push_times,
        facts: facts
            .iter()
            .map(|(t, f)| ((*t).to_owned(), f.clone()))
            .collect(),
    }
}

fn made(time: &str, architectures: &[&str]) -> TagFacts {
    TagFacts {
        time: Some(at(time)),
        architectures: Some(architectures.iter().map(|a| (*a).to_owned()).collect()),
        revision: None,
        single: false,
        platform_digests: BTreeMap::new(),
    }
}

/// (HEAD, manifest GET, blob GET, tag lists, tags API) summed over hosts.
fn counts(s: &Scenario) -> (u64, u64, u64, u64, u64) {
    let t = total(&floor(s));
    assert_eq!((t.token, t.other), (0, 0));
    (
        t.manifest_head,
        t.manifest_get,
        t.blob_get,
        t.tags_list,
        t.hub_api,
    )
}

#[test]
fn a_tag_without_a_track_costs_one_head_shared_by_its_families() {
    let s = scenario(
        vec![
            family("docker.io", "vllm/vllm-openai", "kimi-k3", "amd64"),
            family("docker.io", "vllm/vllm-openai", "kimi-k3", "arm64"),
        ],
        vec![],
    );
    assert_eq!(counts(&s), (1, 0, 0, 0, 0));
}

#[test]
fn a_version_track_reads_only_the_newest_tag_that_qualifies() {
    // v0.27.0 is too young by its image (read to learn it, no push times
    // on ghcr.io), v0.26.0 qualifies: two reads of index, manifest, config.
    let repo = listed(
        &["v0.25.0", "v0.26.0", "v0.27.0", "v0.24.0"],
        false,
        &[
            ("v0.27.0", made("2026-09-01T11:00:00Z", &["amd64"])),
            ("v0.26.0", made("2026-08-20T00:00:00Z", &["amd64"])),
        ],
    );
    let s = scenario(
        vec![family("ghcr.io", "klaud/release", "v0.25.0", "amd64")],
        vec![("ghcr.io", "klaud/release", repo)],
    );
    assert_eq!(counts(&s), (0, 4, 2, 1, 0));
}

#[test]
fn an_up_to_date_version_track_costs_its_tag_list_alone() {
    let repo = listed(&["v0.25.0", "v0.24.0"], false, &[]);
    let s = scenario(
        vec![
            family("nvcr.io", "nvidia/x", "v0.25.0", "amd64"),
            family("nvcr.io", "nvidia/x", "v0.25.0", "arm64"),
        ],
        vec![("nvcr.io", "nvidia/x", repo)],
    );
    assert_eq!(counts(&s), (0, 0, 0, 1, 0));
}

#[test]
fn push_times_pass_over_young_tags_and_missing_platforms_without_a_read() {
    // Docker Hub with its tags API: v0.28.0 too young, v0.27.0 arm64 only,
    // v0.26.0 chosen: one API page. Its digest, age and platform the API
    // told: no pull, and no HEAD (a wave confirms the digest it acts on).
    let repo = listed(
        &["v0.25.0", "v0.26.0", "v0.27.0", "v0.28.0"],
        true,
        &[
            ("v0.28.0", made("2026-09-01T11:00:00Z", &["amd64"])),
            ("v0.27.0", made("2026-08-29T00:00:00Z", &["arm64"])),
            ("v0.26.0", made("2026-08-28T00:00:00Z", &["amd64", "arm64"])),
        ],
    );
    let s = scenario(
        vec![family("docker.io", "klaud/pulls", "v0.25.0", "amd64")],
        vec![("docker.io", "klaud/pulls", repo)],
    );
    assert_eq!(counts(&s), (0, 0, 0, 1, 1));
}

/// Three nightlies named by date and commit, the current one oldest; the
/// newest's revision label names another commit than its tag.
fn nightlies_newest_mislabelled(push_times: bool) -> (String, RepositoryFacts) {
    let tag = |d: &str, c: &str| format!("nightly-dev-{d}-{c}");
    let (old, mid, new) = (
        tag("20260801", "a1b2c3d4"),
        tag("20260810", "b1b2c3d4"),
        tag("20260820", "c1b2c3d4"),
    );
    let mut bad = made("2026-08-21T00:00:00Z", &["amd64"]);
    bad.revision = Some("d".repeat(40));
    let repo = listed(
        &[&old, &mid, &new],
        push_times,
        &[
            (&new, bad),
            (&mid, made("2026-08-11T00:00:00Z", &["amd64"])),
        ],
    );
    (old, repo)
}

#[test]
fn push_times_leave_a_commit_named_tag_to_its_image_to_prove_the_commit() {
    // The tags API tells the nightly's age and platforms, not the commit
    // inside: the chosen tag's amd64 manifest and config are read for the
    // revision label, beside the HEAD. The newest, whose label names
    // another commit, is passed over after its read.
    let (current, repo) = nightlies_newest_mislabelled(true);
    let s = scenario(
        vec![family("docker.io", "org/n", &current, "amd64")],
        vec![("docker.io", "org/n", repo)],
    );
    assert_eq!(counts(&s), (2, 2, 2, 1, 1));
}

#[test]
fn a_push_ordered_track_without_push_times_reads_every_tag_on_one_platform() {
    // Three nightlies and the current one: each read once for its time (on
    // the first family's platform), whatever the families' platforms; the
    // newest old enough is the candidate, and the arm64 family adds only
    // its own platform of it.
    let c = |ch: char| format!("nightly-{}", ch.to_string().repeat(40));
    let (a, b, cc, d) = (c('a'), c('b'), c('c'), c('d'));
    let repo = listed(
        &[&a, &b, &cc, &d],
        false,
        &[
            (&a, made("2026-08-01T00:00:00Z", &["amd64", "arm64"])),
            (&b, made("2026-08-10T00:00:00Z", &["amd64", "arm64"])),
            (&cc, made("2026-08-20T00:00:00Z", &["amd64", "arm64"])),
            (&d, made("2026-09-01T11:00:00Z", &["amd64", "arm64"])),
        ],
    );
    let s = scenario(
        vec![
            family("ghcr.io", "klaud/nightly", &a, "amd64"),
            family("ghcr.io", "klaud/nightly", &a, "arm64"),
        ],
        vec![("ghcr.io", "klaud/nightly", repo)],
    );
    // 4 indexes; 4 timed platforms (amd64), plus cc's arm64 = 5 manifests
    // and 5 configs.
    assert_eq!(counts(&s), (0, 4 + 5, 5, 1, 0));
}

#[test]
fn a_month_day_track_without_push_times_reads_only_tags_that_can_be_newer() {
    // The current tag is 0801; 0720 and 0601 cannot be newer (their latest
    // year puts them before it), 0825 and 0831 can: 0831 is read and found
    // too young, 0825 qualifies. Two reads, one platform each.
    let repo = listed(
        &[
            "dev-nightly-0601",
            "dev-nightly-0720",
            "dev-nightly-0801",
            "dev-nightly-0825",
            "dev-nightly-0831",
        ],
        false,
        &[
            (
                "dev-nightly-0831",
                made("2026-09-01T11:00:00Z", &["amd64", "arm64"]),
            ),
            (
                "dev-nightly-0825",
                made("2026-08-26T00:00:00Z", &["amd64", "arm64"]),
            ),
        ],
    );
    let s = scenario(
        vec![family("ghcr.io", "klaud/md", "dev-nightly-0801", "amd64")],
        vec![("ghcr.io", "klaud/md", repo)],
    );
    assert_eq!(counts(&s), (0, 2 * 2, 2, 1, 0));
}

#[test]
fn docker_hub_without_its_tags_api_reads_only_a_dated_tag_its_text_chose() {
    // Pulls are scarce: the text orders the versions, but v0.5.16 names no
    // date, so only its image tells its age and a plan may defer it rather
    // than spend two pulls a refusal would not repay: nothing is read for
    // it. The dated nightly named today is too young by its own date; the
    // one before it is read (two pulls and its config), whatever its image
    // turns out to be.
    let versions = listed(
        &["v0.5.12-cu130", "v0.5.14-cu130", "v0.5.16-cu130"],
        false,
        &[("v0.5.16-cu130", made("2026-09-01T11:00:00Z", &["amd64"]))],
    );
    let nightly = listed(
        &[
            "nightly-dev-cu13-20260805-211ee642",
            "nightly-dev-cu13-20260820-311ee642",
            "nightly-dev-cu13-20260901-411ee642",
        ],
        false,
        &[],
    );
    let s = scenario(
        vec![
            family("docker.io", "lmsysorg/sglang", "v0.5.12-cu130", "amd64"),
            family(
                "docker.io",
                "lmsysorg/sglang-nightly",
                "nightly-dev-cu13-20260805-211ee642",
                "amd64",
            ),
        ],
        vec![
            ("docker.io", "lmsysorg/sglang", versions),
            ("docker.io", "lmsysorg/sglang-nightly", nightly),
        ],
    );
    assert_eq!(counts(&s), (0, 2, 1, 2, 0));
}

#[test]
fn one_build_pushed_under_two_repositories_is_read_once() {
    // vLLM pushes one v0.27.5 build as both vllm/vllm-openai and
    // vllm/vllm-openai-rocm: the tags API names the same amd64 manifest for
    // both, and content is read once by digest whatever names it. Each tag
    // is still HEADed (its digest confirmed) and each repository listed.
    // The API gives no push time here, so only the image tells its age.
    let mut build = made("2026-08-20T00:00:00Z", &["amd64"]);
    build.time = None;
    build
        .platform_digests
        .insert("amd64".to_owned(), format!("sha256:{}", "5".repeat(64)));
    let repo = || listed(&["v0.27.1", "v0.27.5"], true, &[("v0.27.5", build.clone())]);
    let s = scenario(
        vec![
            family("docker.io", "vllm/vllm-openai", "v0.27.1", "amd64"),
            family("docker.io", "vllm/vllm-openai-rocm", "v0.27.1", "amd64"),
        ],
        vec![
            ("docker.io", "vllm/vllm-openai", repo()),
            ("docker.io", "vllm/vllm-openai-rocm", repo()),
        ],
    );
    assert_eq!(counts(&s), (2, 1, 1, 2, 2));
    // Without the digests the floor cannot know it is one build: two reads.
    let mut apart = s.clone();
    for facts in apart.repositories.values_mut() {
        for tag in facts.facts.values_mut() {
            tag.platform_digests.clear();
        }
    }
    assert_eq!(counts(&apart), (2, 2, 2, 2, 2));
}

#[test]
fn docker_hub_without_its_tags_api_defers_a_push_ordered_track() {
    let repo = listed(
        &[
            "nightly-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "nightly-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        ],
        false,
        &[],
    );
    let s = scenario(
        vec![family(
            "docker.io",
            "vllm/vllm-openai",
            "nightly-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "amd64",
        )],
        vec![("docker.io", "vllm/vllm-openai", repo)],
    );
    assert_eq!(counts(&s), (0, 0, 0, 1, 0));
}

#[test]
fn a_pinned_tag_on_a_track_is_also_headed_and_a_pruned_one_is_replaced() {
    let repo = listed(&["v0.26.0"], false, &[]);
    let mut pinned = family("quay.io", "org/x", "v0.26.0", "amd64");
    pinned.pinned = true;
    let s = scenario(
        vec![pinned, family("quay.io", "org/x", "v0.25.0", "amd64")],
        vec![("quay.io", "org/x", repo)],
    );
    // The pinned family: its HEAD. The pruned one: v0.26.0 read (index,
    // manifest, config); one tag list for both.
    assert_eq!(counts(&s), (1, 2, 1, 1, 0));
}

#[test]
fn a_commit_tag_whose_label_names_another_commit_is_passed_over_after_its_read() {
    let (current, repo) = nightlies_newest_mislabelled(false);
    let s = scenario(
        vec![family("ghcr.io", "org/n", &current, "amd64")],
        vec![("ghcr.io", "org/n", repo)],
    );
    assert_eq!(counts(&s), (0, 4, 2, 1, 0));
}
