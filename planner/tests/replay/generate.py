#!/usr/bin/env python3
"""Writes the replay fixtures from a real InferenceX checkout (run once, by hand).

    python3 planner/tests/replay/generate.py ../shared/fixtures/inferencex/full

For every case below, `expected/` holds byte-exact excerpts of the real files
at the image the maintainers wrote (the master entry block; each recipe the
family runs, cut at the first top-level key after its image fields), and
`base/` the same bytes with that image put back to the old one the
perf-changelog names ("from X to Y") — the inverse of the historic commit,
computed here independently of Klaud's Rust code. Cases marked `hand` have
no old image in the changelog; their old image is written by hand.
"""
import json, os, re, shutil, sys
import yaml

ROOT = sys.argv[1]
OUT = os.path.dirname(os.path.abspath(__file__))
RECIPES = "benchmarks/multi_node/srt-slurm-recipes"
MASTERS = ["configs/nvidia-master.yaml", "configs/amd-master.yaml"]

# (key, old image or old tag, source, extra): from perf-changelog entries whose
# "to" is the family's current image.
CASES = [
    ("dsr1-fp4-gb200-dynamo-trt", "0.5.1-rc0.pre3", "https://github.com/SemiAnalysisAI/InferenceX/pull/510"),
    ("dsr1-fp4-gb200-dynamo-sglang", "v0.5.5.post2", "https://github.com/SemiAnalysisAI/InferenceX/pull/633"),
    ("dsr1-fp4-b300-sglang", "v0.5.11-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/1418"),
    ("dsr1-fp8-b300-sglang", "v0.5.11-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/1419"),
    ("qwen3.5-fp8-mi325x-sglang", "v0.5.10-rocm720-mi30x", "https://github.com/SemiAnalysisAI/InferenceX/pull/1430"),
    ("dsr1-fp8-h200-sglang", "v0.5.11-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/1423"),
    ("dsr1-fp8-b200-sglang-mtp", "v0.5.11-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/1416"),
    ("qwen3.5-fp8-mi300x-sglang", "v0.5.10-rocm720-mi30x", "https://github.com/SemiAnalysisAI/InferenceX/pull/1427"),
    ("dsr1-fp8-mi325x-sglang", "v0.5.9-rocm700-mi30x", "https://github.com/SemiAnalysisAI/InferenceX/pull/1428"),
    ("dsv4-fp4-gb300-dynamo-sglang-mtp", "nightly-dev-cu13-20260509-9ee83034", "https://github.com/SemiAnalysisAI/InferenceX/pull/1637"),
    ("qwen3.5-fp4-b300-sglang-mtp", "lmsysorg/sglang:v0.5.12-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/2057"),
    ("qwen3.5-fp8-h100-sglang", "lmsysorg/sglang:v0.5.12-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/2060"),
    ("qwen3.5-fp8-b200-sglang-mtp", "lmsysorg/sglang:v0.5.12-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/2058"),
    ("qwen3.5-fp4-b200-sglang", "lmsysorg/sglang:v0.5.12-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/2056"),
    ("dsr1-fp8-b300-sglang-mtp", "lmsysorg/sglang:v0.5.12-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/2313"),
    ("qwen3.5-fp8-mi355x-sglang-mtp", "lmsysorg/sglang:v0.5.14-rocm720-mi35x", "https://github.com/SemiAnalysisAI/InferenceX/pull/2349"),
    ("qwen3.5-fp4-mi355x-sglang", "lmsysorg/sglang-rocm:v0.5.15-rocm720-mi35x-20260713", "https://github.com/SemiAnalysisAI/InferenceX/pull/2433"),
    ("dsv4-fp4-gb300-dynamo-sglang-agentic-agg", "nightly-dev-cu13-20260711-7de33ce8", "https://github.com/SemiAnalysisAI/InferenceX/pull/2319"),
    ("dsv4-fp4-gb300-dynamo-sglang-agentic-disagg", "nightly-dev-cu13-20260711-7de33ce8", "https://github.com/SemiAnalysisAI/InferenceX/pull/2319"),
    ("qwen3.5-fp4-mi355x-sglang-agentic-mtp", "lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260811", "https://github.com/SemiAnalysisAI/InferenceX/pull/2677"),
    ("dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp", "lmsysorg/sglang-rocm:v0.5.15.post1-rocm720-mi35x-20260719", "https://github.com/SemiAnalysisAI/InferenceX/pull/2643"),
    ("dsv4-fp4-b200-sglang-agentic-hicache-mtp", "lmsysorg/sglang:v0.5.17-cu130", "https://github.com/SemiAnalysisAI/InferenceX/pull/2703"),
    # hand: the eval twins (EVAL_CONFIG_FILE), selectors and a group.
    ("minimaxm3-fp4-gb300-dynamo-vllm-agentic-mtp-disagg", "vllm/vllm-openai:nightly-0d4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b", "hand"),
    ("glm5.2-fp4-gb300-dynamo-sglang-agentic-disagg", "lmsysorg/sglang:nightly-dev-cu13-20260729-1a2b3c4d", "hand"),
    ("glm5.2-fp4-gb200-dynamo-sglang-agentic-disagg", "lmsysorg/sglang:v0.5.16-cu130", "hand"),
    ("dsv4-fp4-gb200-dynamo-vllm-mtp2", "vllm/vllm-openai:v0.20.0-ubuntu2404", "hand"),
]

SETTING = re.compile(r'"?((?:[A-Z0-9_]*_)?CONFIG_FILE)=([^"\s]+)"?')


def blocks(path):
    """Top-level key -> (start, end) line ranges, comments above included."""
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    keys = [(i, l.split(":")[0]) for i, l in enumerate(lines) if l and not l[0].isspace() and not l.startswith("#")]
    out = {}
    for n, (i, key) in enumerate(keys):
        end = keys[n + 1][0] if n + 1 < len(keys) else len(lines)
        while end > i and (lines[end - 1].startswith("#") or lines[end - 1] == ""):
            end -= 1
        out[key] = (lines, i, end)
    return out


def old_image(current, old):
    if "/" in old or "#" in old:
        return old
    base = current.split("@")[0]
    return base.rsplit(":", 1)[0] + ":" + old


def recipe_paths(entry_text):
    paths = []
    for m in SETTING.finditer(entry_text):
        value = m.group(2).split(":")[0]
        for pre in ("recipes/", RECIPES + "/"):
            if value.startswith(pre):
                p = RECIPES + "/" + value[len(pre):]
                if os.path.isfile(os.path.join(ROOT, p)) and p not in paths:
                    paths.append(p)
    return paths


def excerpt(path):
    text = open(os.path.join(ROOT, path)).read()
    lines = text.split("\n")
    seen, cut = set(), len(lines)
    for i, l in enumerate(lines):
        top = l and not l[0].isspace() and not l.startswith("#")
        if top and {"model", "identity"} <= seen and l.split(":")[0] not in ("model", "identity"):
            cut = i
            break
        if top:
            seen.add(l.split(":")[0])
    return "\n".join(lines[:cut]).rstrip("\n") + "\n"


def main():
    index = {}
    for m in MASTERS:
        for key, value in blocks(m).items():
            index[key] = (m, value)
    docs = {}
    for m in MASTERS:
        docs.update(yaml.safe_load(open(os.path.join(ROOT, m))))
    for key, old, source in CASES:
        master, (lines, start, end) = index[key]
        current = docs[key]["image"]
        old = old_image(current, old)
        # A group: every family that shares a recipe file with this one.
        members = [key]
        mine = set(recipe_paths("\n".join(lines[start:end])))
        for other, (om, (ol, os_, oe)) in index.items():
            if other != key and mine & set(recipe_paths("\n".join(ol[os_:oe]))):
                members.append(other)
        members.sort(key=lambda k: (MASTERS.index(index[k][0]), index[k][1][1]))
        case = os.path.join(OUT, key)
        shutil.rmtree(case, ignore_errors=True)
        files = {}
        master_text = ""
        for member in members:
            ml, ms, me = index[member][1]
            master_text += "\n".join(ml[ms:me]) + "\n"
            for p in recipe_paths("\n".join(ml[ms:me])):
                files.setdefault(p, excerpt(p))
        files[master] = master_text
        for path, expected in files.items():
            base = expected
            if path == master:
                base = base.replace("image: " + current + "\n", "image: " + old + "\n")
                base = base.replace('image: "' + current + '"\n', 'image: "' + old + '"\n')
            else:
                base = base.replace(current, old)
            for kind, text in (("expected", expected), ("base", base)):
                target = os.path.join(case, kind, path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                open(target, "w").write(text)
        json.dump(
            {"family": key, "from": old, "to": current, "source": source, "keys": members},
            open(os.path.join(case, "case.json"), "w"),
            indent=2,
        )
        print(key, len(files), "files", members if len(members) > 1 else "")


main()
