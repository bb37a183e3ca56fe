//! A family group (families sharing in-repository recipes) is planned as
//! one candidate: picked once, under its first member, and only when no
//! member is occupied. Planned against a real `docker-registry` on loopback.

use chrono::{Duration, Utc};
use klaud_planner::plan::{PlanOptions, PlanReport, plan};
use klaud_planner::registry::testkit::{LocalRegistry, PlatformSpec, Pusher};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

const MASTER: &str = "configs/nvidia-master.yaml";
const RECIPES: &str = "benchmarks/multi_node/srt-slurm-recipes";

fn entry(key: &str, image: &str, recipes: &[&str]) -> String {
    let mut text = format!(
        "{key}:\n  image: {image}\n  model: demo/Model\n  model-prefix: demo\n  runner: b200\n  precision: fp4\n  framework: dynamo-vllm\n  multinode: true\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - additional-settings:\n"
    );
    for recipe in recipes {
        text.push_str(&format!("        - \"CONFIG_FILE=recipes/m/{recipe}\"\n"));
    }
    text.push('\n');
    text
}

/// `fam-a` and `fam-b` share `shared.yaml` and run one image; `fam-c`
/// runs alone; `mixed-x` and `mixed-y` share `other.yaml` on two images.
fn checkout(image: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let older = image.replace("v0.25.0", "v0.24.0");
    let master = [
        entry("fam-a", image, &["shared.yaml"]),
        entry("fam-b", image, &["shared.yaml", "own.yaml"]),
        entry("fam-c", image, &["alone.yaml"]),
        entry("mixed-x", image, &["other.yaml"]),
        entry("mixed-y", &older, &["other.yaml"]),
    ]
    .concat();
    let recipes = dir.path().join(RECIPES).join("m");
    std::fs::create_dir_all(&recipes).unwrap();
    for (name, recipe_image) in [
        ("shared.yaml", image),
        ("own.yaml", image),
        ("alone.yaml", image),
        ("other.yaml", image),
    ] {
        std::fs::write(
            recipes.join(name),
            format!("name: r\nmodel:\n  container: \"{recipe_image}\"\n"),
        )
        .unwrap();
    }
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join(MASTER), master).unwrap();
    dir
}

async fn planned(
    registry: &LocalRegistry,
    repository: &Repository,
    occupied: &[&str],
) -> PlanReport {
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("docker.io".to_owned(), registry.base_url());
    let client = RegistryClient::new(config).unwrap();
    let mut options = PlanOptions::new(Utc::now());
    options.max_candidates = 10;
    for key in occupied {
        let family = repository.family(&format!("{MASTER}:{key}")).unwrap();
        options.occupied.insert(family.id.clone());
    }
    plan(repository, &client.session(), &options).await
}

fn picked(report: &PlanReport) -> Vec<(String, Vec<String>)> {
    report
        .candidates
        .iter()
        .map(|c| {
            let key = |f: &str| f.rsplit(':').next().unwrap_or(f).to_owned();
            (key(&c.family), c.members.iter().map(|m| key(m)).collect())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_group_is_one_candidate_and_an_occupied_member_holds_back_the_group() {
    let test = "a_family_group_is_one_candidate_and_an_occupied_member_holds_back_the_group";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let pusher = Pusher::new(registry.base_url());
    let now = Utc::now();
    for (tag, age) in [("v0.24.0", 60), ("v0.25.0", 30), ("v0.26.0", 3)] {
        pusher
            .push_image(
                "klaud/grouped",
                tag,
                &[PlatformSpec::linux(
                    "amd64",
                    &[],
                    Some(now - Duration::days(age)),
                )],
            )
            .await
            .unwrap();
    }
    let dir = checkout("klaud/grouped:v0.25.0");
    let repository = Repository::open(dir.path()).unwrap();
    let report = planned(&registry, &repository, &[]).await;
    // Every family is stale; the group is picked once, the mixed group not
    // at all (it cannot be bumped until aligned).
    let mut got = picked(&report);
    got.sort();
    assert_eq!(
        got,
        [
            (
                "fam-a".to_owned(),
                vec!["fam-a".to_owned(), "fam-b".to_owned()]
            ),
            ("fam-c".to_owned(), vec![]),
        ],
        "{:?}",
        report.candidates
    );
    // The group's candidate id belongs to its first member, so every
    // instance claims the same ref for it.
    let fam_a = repository.family(&format!("{MASTER}:fam-a")).unwrap();
    let group = report
        .candidates
        .iter()
        .find(|c| c.family.ends_with(":fam-a"))
        .unwrap();
    assert!(
        group.id.starts_with(&format!("{}-", fam_a.id)),
        "{}",
        group.id
    );

    // Another instance holds fam-b: the whole group waits.
    let report = planned(&registry, &repository, &["fam-b"]).await;
    assert_eq!(picked(&report), [("fam-c".to_owned(), vec![])]);
}

/// A family a maintainer asked to run now is picked before the others and
/// on top of the budget; an occupied one still is not, and a plan that may
/// pick nothing (a reconcile pass) picks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_now_family_is_picked_first_on_top_of_the_budget() {
    let test = "a_run_now_family_is_picked_first_on_top_of_the_budget";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let pusher = Pusher::new(registry.base_url());
    let now = Utc::now();
    for (tag, age) in [("v0.24.0", 60), ("v0.25.0", 30), ("v0.26.0", 3)] {
        pusher
            .push_image(
                "klaud/grouped",
                tag,
                &[PlatformSpec::linux(
                    "amd64",
                    &[],
                    Some(now - Duration::days(age)),
                )],
            )
            .await
            .unwrap();
    }
    let dir = checkout("klaud/grouped:v0.25.0");
    let repository = Repository::open(dir.path()).unwrap();
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("docker.io".to_owned(), registry.base_url());
    let client = RegistryClient::new(config).unwrap();
    let fam_c = repository
        .family(&format!("{MASTER}:fam-c"))
        .unwrap()
        .id
        .clone();
    let plan_with = |max: usize, occupied: bool| {
        let mut options = PlanOptions::new(now);
        options.max_candidates = max;
        options.run_first.insert(fam_c.clone());
        if occupied {
            options.occupied.insert(fam_c.clone());
        }
        options
    };
    let keys = |report: &PlanReport| -> Vec<String> {
        picked(report).into_iter().map(|(key, _)| key).collect()
    };
    // A budget of one goes to the group; the asked family comes first, on
    // top of it.
    let mut plain = PlanOptions::new(now);
    plain.max_candidates = 1;
    let report = plan(&repository, &client.session(), &plain).await;
    assert_eq!(keys(&report), ["fam-a"]);
    let report = plan(&repository, &client.session(), &plan_with(1, false)).await;
    assert_eq!(keys(&report), ["fam-c", "fam-a"]);
    let report = plan(&repository, &client.session(), &plan_with(1, true)).await;
    assert_eq!(keys(&report), ["fam-a"]);
    let report = plan(&repository, &client.session(), &plan_with(0, false)).await;
    assert!(keys(&report).is_empty(), "{:?}", report.candidates);
}
