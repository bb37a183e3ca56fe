//! Every GraphQL document Klaud sends GitHub fits GitHub's published
//! GraphQL schema: each field it selects exists on its type, each argument
//! on its field, required ones are given, and each variable's value fits
//! its input type (every key a field of it, every required field there,
//! enums and scalars of the right kind). The simulator answers what it
//! receives without a schema, so without this check a misspelt field or a
//! missing input would pass here and fail on GitHub.
//!
//! The schema is `schema.graphql` of the npm package
//! `@octokit/graphql-schema` (GitHub's public schema, MIT), installed by
//! `.ci/run` and found at `KLAUD_GITHUB_GRAPHQL_SCHEMA`, else where
//! `.ci/run` installs it; never copied into the repository.

use std::collections::BTreeMap;
use std::path::PathBuf;

use graphql_parser::query::{
    Definition, Field, OperationDefinition, Selection, SelectionSet, Type, Value as Literal,
};
use graphql_parser::schema::{self, TypeDefinition};
use klaud_lifecycle::engine::MemoryJournal;
use klaud_lifecycle::model::Outcome;
use serde_json::Value;

use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::support::{self, Harness};

/// The package version `.ci/run` installs.
const SCHEMA_VERSION: &str = "15.26.1";

fn schema_text() -> Option<String> {
    let tmp = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let candidates = [
        std::env::var_os("KLAUD_GITHUB_GRAPHQL_SCHEMA").map(PathBuf::from),
        Some(tmp.join(format!(
            "klaud-ci-graphql-schema-{SCHEMA_VERSION}/node_modules/@octokit/graphql-schema/schema.graphql"
        ))),
    ];
    for path in candidates.into_iter().flatten() {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Some(text);
        }
    }
    support::missing_tool(&format!(
        "GitHub's GraphQL schema (npm install --prefix <dir> @octokit/graphql-schema@{SCHEMA_VERSION}, \
         then KLAUD_GITHUB_GRAPHQL_SCHEMA=<dir>/node_modules/@octokit/graphql-schema/schema.graphql)"
    ));
    None
}

/// A field of an object or interface: its arguments and its type.
struct FieldDef {
    args: BTreeMap<String, (String, bool)>,
    of: String,
}

/// The schema's types, by name, as the checks need them.
#[derive(Default)]
struct Schema {
    /// Objects and interfaces: their fields.
    outputs: BTreeMap<String, BTreeMap<String, FieldDef>>,
    /// Input objects: each field's type, and whether it is required
    /// (non-null without a default).
    inputs: BTreeMap<String, BTreeMap<String, (Type<'static, String>, bool)>>,
    enums: BTreeMap<String, Vec<String>>,
    /// Unions: their members.
    unions: BTreeMap<String, Vec<String>>,
}

/// The named type under a type's list and non-null wrappers (`schema` and
/// `query` share one `Type`).
fn named(t: &Type<'_, String>) -> String {
    match t {
        Type::NamedType(n) => n.clone(),
        Type::ListType(t) | Type::NonNullType(t) => named(t),
    }
}

fn required(t: &Type<'_, String>, default: bool) -> bool {
    matches!(t, Type::NonNullType(_)) && !default
}

impl Schema {
    fn parse(text: &str) -> Schema {
        let doc = schema::parse_schema::<String>(text)
            .expect("GitHub's schema parses")
            .into_static();
        let mut s = Schema::default();
        for d in doc.definitions {
            let schema::Definition::TypeDefinition(t) = d else {
                continue;
            };
            let fields = |fields: Vec<schema::Field<'static, String>>| {
                fields
                    .into_iter()
                    .map(|f| {
                        let args = f
                            .arguments
                            .iter()
                            .map(|a| {
                                let req = required(&a.value_type, a.default_value.is_some());
                                (a.name.clone(), (named(&a.value_type), req))
                            })
                            .collect();
                        let of = named(&f.field_type);
                        (f.name, FieldDef { args, of })
                    })
                    .collect::<BTreeMap<_, _>>()
            };
            match t {
                TypeDefinition::Object(o) => {
                    s.outputs.insert(o.name, fields(o.fields));
                }
                TypeDefinition::Interface(i) => {
                    s.outputs.insert(i.name, fields(i.fields));
                }
                TypeDefinition::InputObject(i) => {
                    let f = i
                        .fields
                        .into_iter()
                        .map(|f| {
                            let req = required(&f.value_type, f.default_value.is_some());
                            (f.name, (f.value_type, req))
                        })
                        .collect();
                    s.inputs.insert(i.name, f);
                }
                TypeDefinition::Enum(e) => {
                    s.enums
                        .insert(e.name, e.values.into_iter().map(|v| v.name).collect());
                }
                TypeDefinition::Union(u) => {
                    s.unions.insert(u.name, u.types);
                }
                TypeDefinition::Scalar(_) => {}
            }
        }
        s
    }

    /// What `query` with `variables` does not fit, in words.
    fn problems(&self, query: &str, variables: &Value) -> Vec<String> {
        let doc = match graphql_parser::parse_query::<String>(query) {
            Ok(doc) => doc,
            Err(e) => return vec![format!("does not parse: {e}")],
        };
        let mut found = Vec::new();
        for d in &doc.definitions {
            let Definition::Operation(op) = d else {
                found.push("fragment definitions are not checked".into());
                continue;
            };
            let (root, declared, set) = match op {
                OperationDefinition::Query(q) => {
                    ("Query", &q.variable_definitions, &q.selection_set)
                }
                OperationDefinition::Mutation(m) => {
                    ("Mutation", &m.variable_definitions, &m.selection_set)
                }
                other => {
                    found.push(format!("an operation Klaud never sends: {other:?}"));
                    continue;
                }
            };
            let mut types = BTreeMap::new();
            for v in declared {
                types.insert(v.name.clone(), v.var_type.clone());
                let value = variables.get(&v.name).unwrap_or(&Value::Null);
                self.value_fits(&v.var_type, value, &format!("${}", v.name), &mut found);
            }
            self.selection_fits(root, set, &types, &mut found);
        }
        found
    }

    fn selection_fits(
        &self,
        on: &str,
        set: &SelectionSet<'_, String>,
        variables: &BTreeMap<String, Type<'_, String>>,
        found: &mut Vec<String>,
    ) {
        for item in &set.items {
            match item {
                Selection::Field(f) => self.field_fits(on, f, variables, found),
                Selection::InlineFragment(i) => {
                    let on = match &i.type_condition {
                        Some(graphql_parser::query::TypeCondition::On(t)) => t.as_str(),
                        None => on,
                    };
                    if !self.outputs.contains_key(on) {
                        found.push(format!("no type {on} to spread on"));
                        continue;
                    }
                    self.selection_fits(on, &i.selection_set, variables, found);
                }
                Selection::FragmentSpread(s) => {
                    found.push(format!("fragment ...{} is not checked", s.fragment_name));
                }
            }
        }
    }

    fn field_fits(
        &self,
        on: &str,
        f: &Field<'_, String>,
        variables: &BTreeMap<String, Type<'_, String>>,
        found: &mut Vec<String>,
    ) {
        if f.name == "__typename" {
            return;
        }
        let Some(def) = self.outputs.get(on).and_then(|fields| fields.get(&f.name)) else {
            found.push(format!("{on} has no field {}", f.name));
            return;
        };
        for (name, value) in &f.arguments {
            let Some((of, _)) = def.args.get(name) else {
                found.push(format!("{on}.{} has no argument {name}", f.name));
                continue;
            };
            if let Literal::Variable(v) = value {
                match variables.get(v) {
                    Some(t) if named(t) == *of => {}
                    Some(t) => found.push(format!(
                        "{on}.{}({name}:) takes {of}, ${v} is declared {t}",
                        f.name
                    )),
                    None => found.push(format!("${v} is used but not declared")),
                }
            }
        }
        for (name, (_, req)) in &def.args {
            if *req && !f.arguments.iter().any(|(n, _)| n == name) {
                found.push(format!("{on}.{} needs argument {name}", f.name));
            }
        }
        if f.selection_set.items.is_empty() {
            if self.outputs.contains_key(&def.of) || self.unions.contains_key(&def.of) {
                found.push(format!("{on}.{} needs a selection of {}", f.name, def.of));
            }
            return;
        }
        if self.outputs.contains_key(&def.of) || self.unions.contains_key(&def.of) {
            self.selection_fits(&def.of, &f.selection_set, variables, found);
        } else {
            found.push(format!(
                "{on}.{} is a leaf ({}) with a selection",
                f.name, def.of
            ));
        }
    }

    /// Whether `value` fits the declared type `t` (of a variable).
    fn value_fits(&self, t: &Type<'_, String>, value: &Value, at: &str, found: &mut Vec<String>) {
        match t {
            Type::NonNullType(inner) => {
                if value.is_null() {
                    found.push(format!("{at} is null, the type is {t}"));
                } else {
                    self.value_fits(inner, value, at, found);
                }
            }
            Type::ListType(inner) => match value {
                Value::Null => {}
                Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        self.value_fits(inner, v, &format!("{at}[{i}]"), found);
                    }
                }
                single => self.value_fits(inner, single, at, found),
            },
            Type::NamedType(name) => self.named_fits(name, value, at, found),
        }
    }

    fn named_fits(&self, name: &str, value: &Value, at: &str, found: &mut Vec<String>) {
        if value.is_null() {
            return;
        }
        if let Some(fields) = self.inputs.get(name) {
            let Some(given) = value.as_object() else {
                found.push(format!("{at} should be an {name} object"));
                return;
            };
            for key in given.keys() {
                if !fields.contains_key(key) {
                    found.push(format!("{at}: {name} has no field {key}"));
                }
            }
            for (key, (t, req)) in fields {
                let v = given.get(key).unwrap_or(&Value::Null);
                if *req && v.is_null() {
                    found.push(format!("{at}: {name}.{key} is required"));
                }
                self.value_fits(t, v, &format!("{at}.{key}"), found);
            }
            return;
        }
        if let Some(values) = self.enums.get(name) {
            if !value
                .as_str()
                .is_some_and(|v| values.iter().any(|e| e == v))
            {
                found.push(format!("{at} is not a {name}: {value}"));
            }
            return;
        }
        let fits = match name {
            "Int" => value.is_i64(),
            "Float" => value.is_number(),
            "Boolean" => value.is_boolean(),
            "ID" => value.is_string() || value.is_i64(),
            // String and GitHub's string scalars (GitObjectID, Base64String,
            // URI, DateTime, …).
            _ => value.is_string(),
        };
        if !fits {
            found.push(format!("{at} is not a {name}: {value}"));
        }
    }
}

/// The checker itself: a document that does not fit is told apart from
/// one that does (a check that passes everything proves nothing).
#[test]
fn the_check_tells_a_misfit_from_a_fit() {
    let Some(text) = schema_text() else {
        return;
    };
    let s = Schema::parse(&text);
    let fit = "mutation($input: CreateRefInput!) { createRef(input: $input) { ref { name target { oid } } } }";
    let vars = serde_json::json!({"input": {"repositoryId": "R_1", "name": "refs/heads/x", "oid": "a".repeat(40)}});
    assert_eq!(s.problems(fit, &vars), Vec::<String>::new());
    let misfits = [
        (
            "mutation($input: CreateRefInput!) { createRef(input: $input) { ref { nom } } }",
            vars.clone(),
        ),
        (
            "mutation($input: CreateRefInput!) { createRef(input: $input) { ref { name } } }",
            serde_json::json!({"input": {"name": "refs/heads/x", "oid": "a"}}),
        ),
        (
            "mutation($input: CreateRefInput!) { createRef(input: $input) { ref { name } } }",
            serde_json::json!({"input": {"repositoryId": "R", "name": "n", "oid": "a", "force": true}}),
        ),
        (
            "mutation($input: CreateRefInput!) { createRef(input: $input) }",
            vars.clone(),
        ),
        (
            "mutation($input: CreateCommitOnBranchInput!) { createRef(input: $input) { ref { name } } }",
            vars.clone(),
        ),
        ("mutation { createRef { ref { name } } }", vars.clone()),
        ("query { repository(owner: \"o\") { id } }", vars.clone()),
    ];
    for (query, vars) in misfits {
        assert!(!s.problems(query, &vars).is_empty(), "{query} {vars}");
    }
}

/// Every document a validated lifecycle sends (the branch with its bump
/// commit in one document, the changelog commit, ready for review) and
/// the issue-editor query of the dashboard's steering fit the schema.
#[tokio::test]
async fn every_graphql_document_klaud_sends_fits_githubs_schema() {
    let Some(text) = schema_text() else {
        return;
    };
    let schema = Schema::parse(&text);
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated),
        "{:?}",
        rec.ending
    );
    let number = rec.pull.expect("pull").get();
    // The simulator keeps pull requests apart from issues, so it answers
    // "not found" here: the document sent is what is checked.
    let _ = env.forge.issue_editor(number).await;
    let sent = env.stack.state().graphql_documents().await;
    let mutations: Vec<&str> = sent
        .iter()
        .filter_map(|d| {
            [
                "createRef",
                "createCommitOnBranch",
                "markPullRequestReadyForReview",
            ]
            .into_iter()
            .find(|m| d.query.contains(m))
        })
        .collect();
    for needed in [
        "createRef",
        "createCommitOnBranch",
        "markPullRequestReadyForReview",
    ] {
        assert!(
            mutations.contains(&needed),
            "{needed} was sent: {mutations:?}"
        );
    }
    assert!(sent.iter().any(|d| d.query.contains("lastEditedAt")));
    for d in &sent {
        let problems = schema.problems(&d.query, &d.variables);
        assert!(
            problems.is_empty(),
            "{}\n{}\ndoes not fit GitHub's schema: {problems:#?}",
            d.query,
            d.variables
        );
    }
}
