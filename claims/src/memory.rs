//! An in-memory [`RefStore`] with GitHub's semantics, for tests of this crate
//! and of the crates built on it.
//!
//! Creates are atomic (an existing ref is `AlreadyExists`), non-forced updates
//! must be fast-forwards (checked by walking parents), and faults can be
//! injected per operation, including "the write happened, then the response
//! was lost" (a 502 after the fact).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::store::{RefStore, RefStoreError, RefTip};

/// A store operation, for fault injection and the call log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`RefStore::read_ref`].
    ReadRef,
    /// [`RefStore::list_refs`].
    ListRefs,
    /// [`RefStore::create_commit`].
    CreateCommit,
    /// [`RefStore::create_ref`].
    CreateRef,
    /// [`RefStore::fast_forward_ref`].
    FastForwardRef,
    /// [`RefStore::delete_ref`].
    DeleteRef,
    /// [`RefStore::commit_tree`].
    CommitTree,
}

/// What an injected fault does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Fail before doing anything, with [`RefStoreError::Other`].
    Fail(String),
    /// Do the operation, then report [`RefStoreError::Other`] as if the
    /// response had been lost.
    FailAfterWrite(String),
}

#[derive(Debug, Clone)]
struct Commit {
    message: String,
    tree: String,
    parents: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    refs: BTreeMap<String, String>,
    commits: HashMap<String, Commit>,
    next_object: u64,
    faults: HashMap<Op, VecDeque<Fault>>,
    calls: Vec<Op>,
}

impl State {
    fn new_sha(&mut self, kind: &str) -> String {
        self.next_object += 1;
        // Distinct, sha-shaped names; content addressing is not needed here.
        let n = self.next_object;
        let tag: u32 = if kind == "tree" { 0x7ee_7ee } else { 0xc0c_0c0 };
        format!("{tag:08x}{n:032x}")
    }

    fn tip(&self, name: &str, sha: &str) -> Option<RefTip> {
        let commit = self.commits.get(sha)?;
        Some(RefTip {
            name: name.to_owned(),
            sha: sha.to_owned(),
            message: commit.message.clone(),
            parents: commit.parents.clone(),
            tree: commit.tree.clone(),
        })
    }

    fn descends_from(&self, sha: &str, ancestor: &str) -> bool {
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([sha.to_owned()]);
        while let Some(current) = queue.pop_front() {
            if current == ancestor {
                return true;
            }
            if !seen.insert(current.clone()) {
                continue;
            }
            if let Some(commit) = self.commits.get(&current) {
                queue.extend(commit.parents.iter().cloned());
            }
        }
        false
    }
}

/// The in-memory ref store. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct MemoryRefStore {
    state: Mutex<State>,
}

impl MemoryRefStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated
        // (every mutation is a single insert/remove), so poisoning is ignored.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a root commit with a fresh tree, e.g. a base-branch head.
    pub fn seed_commit(&self, message: &str) -> String {
        let mut state = self.lock();
        let tree = state.new_sha("tree");
        let sha = state.new_sha("commit");
        state.commits.insert(
            sha.clone(),
            Commit {
                message: message.to_owned(),
                tree,
                parents: vec![],
            },
        );
        sha
    }

    /// Adds a commit on a tree the store has not seen (a fake forge keeps
    /// the files of its trees itself); its sha.
    pub fn commit_on_tree(&self, message: &str, tree: &str, parents: &[String]) -> String {
        let mut state = self.lock();
        let sha = state.new_sha("commit");
        state.commits.insert(
            sha.clone(),
            Commit {
                message: message.to_owned(),
                tree: tree.to_owned(),
                parents: parents.to_vec(),
            },
        );
        sha
    }

    /// Points `name` at `sha` unconditionally, as a maintainer's force-push
    /// would. Returns false when the commit is unknown.
    pub fn force_ref(&self, name: &str, sha: &str) -> bool {
        let mut state = self.lock();
        if !state.commits.contains_key(sha) {
            return false;
        }
        state.refs.insert(name.to_owned(), sha.to_owned());
        true
    }

    /// Writes a commit with an arbitrary message on top of `parent` and
    /// force-points `name` at it (to plant foreign or malformed claims).
    pub fn plant(&self, name: &str, message: &str, parent: &str) -> Option<String> {
        let mut state = self.lock();
        let tree = state.commits.get(parent)?.tree.clone();
        let sha = state.new_sha("commit");
        state.commits.insert(
            sha.clone(),
            Commit {
                message: message.to_owned(),
                tree,
                parents: vec![parent.to_owned()],
            },
        );
        state.refs.insert(name.to_owned(), sha.clone());
        Some(sha)
    }

    /// The sha a ref points at.
    pub fn ref_sha(&self, name: &str) -> Option<String> {
        self.lock().refs.get(name).cloned()
    }

    /// Every ref name, sorted.
    pub fn ref_names(&self) -> Vec<String> {
        self.lock().refs.keys().cloned().collect()
    }

    /// Queues a fault for the next call of `op` (faults queue per operation).
    pub fn inject(&self, op: Op, fault: Fault) {
        self.lock().faults.entry(op).or_default().push_back(fault);
    }

    /// Every operation called so far, in order.
    pub fn calls(&self) -> Vec<Op> {
        self.lock().calls.clone()
    }

    fn begin(&self, op: Op) -> Result<(MutexGuard<'_, State>, Option<String>), RefStoreError> {
        let mut state = self.lock();
        state.calls.push(op);
        match state.faults.get_mut(&op).and_then(VecDeque::pop_front) {
            Some(Fault::Fail(message)) => Err(RefStoreError::Other(message)),
            Some(Fault::FailAfterWrite(message)) => Ok((state, Some(message))),
            None => Ok((state, None)),
        }
    }
}

fn finish<T>(result: Result<T, RefStoreError>, after: Option<String>) -> Result<T, RefStoreError> {
    match (result, after) {
        (Ok(_), Some(message)) => Err(RefStoreError::Other(message)),
        (result, _) => result,
    }
}

#[async_trait]
impl RefStore for MemoryRefStore {
    async fn read_ref(&self, name: &str) -> Result<Option<RefTip>, RefStoreError> {
        let (state, after) = self.begin(Op::ReadRef)?;
        let result = Ok(state.refs.get(name).and_then(|sha| state.tip(name, sha)));
        finish(result, after)
    }

    async fn list_refs(&self, prefix: &str) -> Result<Vec<RefTip>, RefStoreError> {
        let (state, after) = self.begin(Op::ListRefs)?;
        let tips = state
            .refs
            .range(prefix.to_owned()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .filter_map(|(name, sha)| state.tip(name, sha))
            .collect();
        finish(Ok(tips), after)
    }

    async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, RefStoreError> {
        let (mut state, after) = self.begin(Op::CreateCommit)?;
        if let Some(missing) = parents.iter().find(|p| !state.commits.contains_key(*p)) {
            return Err(RefStoreError::NotFound(format!("parent commit {missing}")));
        }
        let known_tree = state.commits.values().any(|c| c.tree == tree);
        if !known_tree {
            return Err(RefStoreError::NotFound(format!("tree {tree}")));
        }
        let sha = state.new_sha("commit");
        state.commits.insert(
            sha.clone(),
            Commit {
                message: message.to_owned(),
                tree: tree.to_owned(),
                parents: parents.to_vec(),
            },
        );
        finish(Ok(sha), after)
    }

    async fn create_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        let (mut state, after) = self.begin(Op::CreateRef)?;
        if state.refs.contains_key(name) {
            return Err(RefStoreError::AlreadyExists(name.to_owned()));
        }
        if !state.commits.contains_key(sha) {
            return Err(RefStoreError::NotFound(format!("commit {sha}")));
        }
        state.refs.insert(name.to_owned(), sha.to_owned());
        finish(Ok(()), after)
    }

    async fn fast_forward_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        let (mut state, after) = self.begin(Op::FastForwardRef)?;
        let Some(current) = state.refs.get(name).cloned() else {
            return Err(RefStoreError::NotFound(name.to_owned()));
        };
        if !state.commits.contains_key(sha) {
            return Err(RefStoreError::NotFound(format!("commit {sha}")));
        }
        if !state.descends_from(sha, &current) {
            return Err(RefStoreError::NotFastForward(name.to_owned()));
        }
        state.refs.insert(name.to_owned(), sha.to_owned());
        finish(Ok(()), after)
    }

    async fn delete_ref(&self, name: &str) -> Result<(), RefStoreError> {
        let (mut state, after) = self.begin(Op::DeleteRef)?;
        if state.refs.remove(name).is_none() {
            return Err(RefStoreError::NotFound(name.to_owned()));
        }
        finish(Ok(()), after)
    }

    async fn commit_tree(&self, sha: &str) -> Result<String, RefStoreError> {
        let (state, after) = self.begin(Op::CommitTree)?;
        let result = state
            .commits
            .get(sha)
            .map(|c| c.tree.clone())
            .ok_or_else(|| RefStoreError::NotFound(format!("commit {sha}")));
        finish(result, after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CommitSha;

    #[tokio::test]
    async fn create_is_exclusive_and_fast_forward_walks_parents() {
        let store = MemoryRefStore::new();
        let base = store.seed_commit("base");
        let tree = store.commit_tree(&base).await.unwrap();
        let a = store
            .create_commit("a", &tree, std::slice::from_ref(&base))
            .await
            .unwrap();
        let b = store
            .create_commit("b", &tree, std::slice::from_ref(&a))
            .await
            .unwrap();
        let side = store
            .create_commit("side", &tree, std::slice::from_ref(&base))
            .await
            .unwrap();

        store.create_ref("refs/heads/x", &base).await.unwrap();
        assert!(matches!(
            store.create_ref("refs/heads/x", &a).await,
            Err(RefStoreError::AlreadyExists(_))
        ));
        store.fast_forward_ref("refs/heads/x", &b).await.unwrap();
        assert!(matches!(
            store.fast_forward_ref("refs/heads/x", &side).await,
            Err(RefStoreError::NotFastForward(_))
        ));
        assert!(matches!(
            store.fast_forward_ref("refs/heads/x", &a).await,
            Err(RefStoreError::NotFastForward(_))
        ));
        let tip = store.read_ref("refs/heads/x").await.unwrap().unwrap();
        assert_eq!((tip.sha.as_str(), tip.message.as_str()), (b.as_str(), "b"));
        assert_eq!(tip.parents, vec![a]);
        store.delete_ref("refs/heads/x").await.unwrap();
        assert!(store.read_ref("refs/heads/x").await.unwrap().is_none());
        assert!(matches!(
            store.delete_ref("refs/heads/x").await,
            Err(RefStoreError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn list_refs_filters_by_prefix() {
        let store = MemoryRefStore::new();
        let base = store.seed_commit("base");
        for name in [
            "refs/heads/klaud/claim-1",
            "refs/heads/klaud/claim-2",
            "refs/heads/klaud/auto-1",
            "refs/heads/main",
        ] {
            store.create_ref(name, &base).await.unwrap();
        }
        let names: Vec<String> = store
            .list_refs("refs/heads/klaud/claim-")
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(
            names,
            ["refs/heads/klaud/claim-1", "refs/heads/klaud/claim-2"]
        );
    }

    #[tokio::test]
    async fn faults_fire_once_and_after_write_faults_still_write() {
        let store = MemoryRefStore::new();
        let base = store.seed_commit("base");
        store.inject(Op::CreateRef, Fault::Fail("502 before".into()));
        store.inject(Op::CreateRef, Fault::FailAfterWrite("502 after".into()));
        assert!(
            matches!(store.create_ref("refs/heads/x", &base).await, Err(RefStoreError::Other(m)) if m == "502 before")
        );
        assert_eq!(store.ref_sha("refs/heads/x"), None);
        assert!(
            matches!(store.create_ref("refs/heads/x", &base).await, Err(RefStoreError::Other(m)) if m == "502 after")
        );
        assert_eq!(store.ref_sha("refs/heads/x"), Some(base));
        assert_eq!(store.calls(), [Op::CreateRef, Op::CreateRef]);
    }

    #[tokio::test]
    async fn amend_rewrites_our_record_by_compare_and_swap() {
        use crate::{
            Acquire, CandidateId, ClaimBook, ClaimCandidate, Claimant, FamilyId, ManualClock, Renew,
        };
        let store = MemoryRefStore::new();
        let base = store.seed_commit("base");
        let clock = ManualClock::new(chrono::Utc::now());
        let book = ClaimBook::new(&store, &clock, Claimant::new(uuid::Uuid::new_v4()));
        let family = FamilyId::new("d92e15065c55779d").unwrap();
        let a = CandidateId::new("d92e15065c55779d-0123456789abcdef").unwrap();
        let b = CandidateId::new("d92e15065c55779d-fedcba9876543210").unwrap();
        let Acquire::Won(held) = book
            .acquire(
                &family,
                vec![ClaimCandidate::new(
                    CommitSha::parse(&base).unwrap(),
                    "f:k",
                    a.clone(),
                )],
                &base,
                7,
                chrono::TimeDelta::hours(1),
            )
            .await
            .unwrap()
        else {
            panic!("not won")
        };
        let mut record = held.record.clone();
        record.candidates.push(ClaimCandidate::new(
            CommitSha::parse(&base).unwrap(),
            "f:k",
            b.clone(),
        ));
        record
            .extra
            .insert("experiment-final".into(), serde_json::json!(a.as_str()));
        let Renew::Renewed(amended) = book.amend(&held, record.clone()).await.unwrap() else {
            panic!("not amended")
        };
        let entry = book.inspect(&family).await.unwrap().unwrap();
        assert_eq!(entry.record.unwrap(), record);
        // The old tip is stale now: amending from it loses, never overwrites.
        assert!(matches!(
            book.amend(&held, record.clone()).await.unwrap(),
            Renew::Lost(_)
        ));
        let mut foreign = amended.record.clone();
        foreign.fence = Some(9);
        assert!(book.amend(&amended, foreign).await.is_err());
    }
}
