#!/bin/sh
# An example Klaud repair hook (lifecycle.repair_command = ["configs/repair-hook-example.sh"]).
# Klaud writes the input (configs/repair-hook.md, version 1) to stdin. This
# example only reads it, lists the failed jobs of the failed run with their log
# pages, and gives up with a reason: replace the marked part with the agent
# or script that edits the recipe and pushes a fix to "$branch" as the bot.
# Needs: jq, curl, and GITHUB_TOKEN (the bot's token) in the environment.
set -eu

input=$(cat)
version=$(printf '%s' "$input" | jq -r '.version')
if [ "$version" != "1" ]; then
    echo "unsupported repair input version $version" >&2
    exit 2
fi
api=$(printf '%s' "$input" | jq -r '.api_base // "https://api.github.com"')
repo=$(printf '%s' "$input" | jq -r '.repository')
branch=$(printf '%s' "$input" | jq -r '.branch')
head=$(printf '%s' "$input" | jq -r '.head')
run=$(printf '%s' "$input" | jq -r '.run.id // empty')
left=$(printf '%s' "$input" | jq -r '.budget_left')

echo "repairing $branch at $head ($left repairs left after this one)" >&2
if [ -n "$run" ]; then
    curl -fsS -H "Authorization: Bearer ${GITHUB_TOKEN:?set GITHUB_TOKEN}" \
        -H "Accept: application/vnd.github+json" \
        "$api/repos/$repo/actions/runs/$run/jobs?per_page=100" |
        jq -r '.jobs[] | select(.conclusion != "success" and .conclusion != "skipped") | "\(.name): \(.conclusion) \(.html_url)"' >&2
fi

# --- Replace from here: make the fix, commit it with a message that names the
# evidence, and push it to "$branch" (fast-forward from "$head") as the bot;
# then exit 0.
echo "the example hook makes no fix" >&2
exit 1
