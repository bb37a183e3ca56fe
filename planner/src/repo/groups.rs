//! Families that share in-repository recipe files ([`FamilyGroup`]): with
//! one current image they are bumped together.

use super::*;

/// Groups families that share in-repository recipe files (connected
/// components: A shares with B and B with C puts all three together).
pub(super) fn family_groups(families: &[Family]) -> Vec<FamilyGroup> {
    let mut users: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, family) in families.iter().enumerate() {
        let mut paths: Vec<&str> = family
            .recipes
            .iter()
            .filter(|r| r.in_repository)
            .map(|r| r.path.as_str())
            .collect();
        paths.sort_unstable();
        paths.dedup();
        for path in paths {
            users.entry(path).or_default().push(index);
        }
    }
    // Union-find over family indices; small enough that path halving is all
    // the balancing it needs.
    let mut parent: Vec<usize> = (0..families.len()).collect();
    fn find(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for members in users.values() {
        for pair in members.windows(2) {
            let (a, b) = (find(&mut parent, pair[0]), find(&mut parent, pair[1]));
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut components: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for index in 0..families.len() {
        let head = find(&mut parent, index);
        components.entry(head).or_default().push(index);
    }
    components
        .into_values()
        .filter(|members| members.len() > 1)
        .map(|members| {
            let shared_recipes = users
                .iter()
                .filter(|(_, u)| u.len() > 1 && members.contains(&u[0]))
                .map(|(path, _)| (*path).to_owned())
                .collect();
            let first = families[members[0]].image();
            FamilyGroup {
                families: members
                    .iter()
                    .map(|i| families[*i].family.clone())
                    .collect(),
                keys: members.iter().map(|i| families[*i].key.clone()).collect(),
                shared_recipes,
                images: members
                    .iter()
                    .map(|i| families[*i].image().to_string())
                    .collect(),
                same_image: members
                    .iter()
                    .all(|i| families[*i].image().same_image(first)),
            }
        })
        .collect()
}
