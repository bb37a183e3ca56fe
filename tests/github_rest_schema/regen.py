#!/usr/bin/env python3
"""Regenerates `rest-2022-11-28.extract.json`: the response schemas of the
GitHub REST operations Klaud uses (and every component they reference),
taken from GitHub's OpenAPI description as the npm package
`@octokit/openapi` ships it (MIT; a copy of GitHub's
github/rest-api-description with Octokit extensions).

OpenAPI 3.0's `nullable` is rewritten into JSON Schema (`type` lists, or
`anyOf` with `null`) so a plain JSON-Schema validator can check answers.

Usage:
    npm pack @octokit/openapi@23.0.2        # or any later version
    tar xzf octokit-openapi-*.tgz
    python3 tests/github_rest_schema/regen.py package/generated/api.github.com.json
"""

import json
import os
import sys

# (method, path, status) of every answer Klaud decodes. Keep in step with
# `src/github/src/api.rs` and the test in `tests/github_schema.rs`.
OPERATIONS = [
    ("get", "/user", "200"),
    ("get", "/users/{username}", "200"),
    ("get", "/repos/{owner}/{repo}", "200"),
    ("get", "/repos/{owner}/{repo}/collaborators/{username}/permission", "200"),
    ("post", "/repos/{owner}/{repo}/git/blobs", "201"),
    ("get", "/repos/{owner}/{repo}/git/blobs/{file_sha}", "200"),
    ("post", "/repos/{owner}/{repo}/git/trees", "201"),
    ("get", "/repos/{owner}/{repo}/git/trees/{tree_sha}", "200"),
    ("post", "/repos/{owner}/{repo}/git/commits", "201"),
    ("get", "/repos/{owner}/{repo}/git/commits/{commit_sha}", "200"),
    ("get", "/repos/{owner}/{repo}/git/ref/{ref}", "200"),
    ("post", "/repos/{owner}/{repo}/git/refs", "201"),
    ("patch", "/repos/{owner}/{repo}/git/refs/{ref}", "200"),
    ("get", "/repos/{owner}/{repo}/git/matching-refs/{ref}", "200"),
    ("get", "/repos/{owner}/{repo}/contents/{path}", "200"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}", "200"),
    ("get", "/repos/{owner}/{repo}/compare/{basehead}", "200"),
    ("get", "/repos/{owner}/{repo}/pulls", "200"),
    ("post", "/repos/{owner}/{repo}/pulls", "201"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}", "200"),
    ("patch", "/repos/{owner}/{repo}/pulls/{pull_number}", "200"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/files", "200"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}", "200"),
    # The dashboard issue: found by its label and author, opened once, its
    # body and state edited.
    ("get", "/repos/{owner}/{repo}/issues", "200"),
    ("post", "/repos/{owner}/{repo}/issues", "201"),
    ("patch", "/repos/{owner}/{repo}/issues/{issue_number}", "200"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments", "200"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments", "201"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}", "200"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/labels", "200"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/labels", "200"),
    ("delete", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}", "200"),
    ("get", "/repos/{owner}/{repo}/actions/workflows", "200"),
    ("get", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}", "200"),
    ("get", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs", "200"),
    ("get", "/repos/{owner}/{repo}/actions/runs", "200"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}", "200"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs", "200"),
    ("post", "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel", "202"),
    ("post", "/repos/{owner}/{repo}/actions/runs/{run_id}/rerun", "201"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts", "200"),
    ("get", "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}", "200"),
    # CODEOWNER sign-off verification: the sign-off as a comment, review or
    # inline review comment, the commits and check runs of the pull request,
    # and the commit status Klaud sets.
    ("get", "/repos/{owner}/{repo}/issues/comments/{comment_id}", "200"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/commits", "200"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", "200"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", "200"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}", "200"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/comments", "200"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/comments", "201"),
    ("get", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", "200"),
    ("patch", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", "200"),
    ("post", "/repos/{owner}/{repo}/statuses/{sha}", "201"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/statuses", "200"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/status", "200"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/check-runs", "200"),
]

DROP = {"example", "examples", "description", "title", "externalDocs", "summary"}


def to_json_schema(node):
    """OpenAPI 3.0 schema object -> JSON Schema (draft 2020-12)."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in DROP or k.startswith("x-"):
            continue
        if k == "properties":
            out[k] = {name: to_json_schema(s) for name, s in v.items()}
        else:
            out[k] = to_json_schema(v)
    if out.pop("nullable", False):
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = out["enum"] + [None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def refs(node, found):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str):
            found.add(r)
        for v in node.values():
            refs(v, found)
    elif isinstance(node, list):
        for v in node:
            refs(v, found)


def resolve(doc, pointer):
    cur = doc
    for part in pointer.lstrip("#/").split("/"):
        cur = cur[part]
    return cur


def main(src, dst):
    with open(src) as f:
        doc = json.load(f)
    operations = {}
    wanted = set()
    for method, path, status in OPERATIONS:
        op = doc["paths"][path][method]
        resp = op["responses"][status]
        if "$ref" in resp:
            resp = resolve(doc, resp["$ref"])
        content = resp.get("content", {})
        schema = (content.get("application/json") or {}).get("schema")
        operations[f"{method.upper()} {path} {status}"] = {
            "operationId": op.get("operationId"),
            "schema": to_json_schema(schema) if schema is not None else None,
        }
        refs(schema, wanted)
    schemas = {}
    todo = sorted(wanted)
    while todo:
        r = todo.pop()
        if not r.startswith("#/components/schemas/"):
            raise SystemExit(f"unexpected reference {r}")
        name = r.rsplit("/", 1)[1]
        if name in schemas:
            continue
        raw = resolve(doc, r)
        schemas[name] = to_json_schema(raw)
        more = set()
        refs(raw, more)
        todo.extend(sorted(more - {f"#/components/schemas/{n}" for n in schemas}))
    out = {
        "x-source": "GitHub REST API OpenAPI description (github/rest-api-description), "
        f"as shipped by @octokit/openapi {doc['info'].get('version')}; "
        "trimmed by tests/github_rest_schema/regen.py",
        "x-license": "MIT (see tests/github_rest_schema/LICENSE-octokit-openapi)",
        "operations": operations,
        "components": {"schemas": dict(sorted(schemas.items()))},
    }
    with open(dst, "w") as f:
        json.dump(out, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"{len(operations)} operations, {len(schemas)} components -> {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    main(sys.argv[1], os.path.join(here, "rest-2022-11-28.extract.json"))
