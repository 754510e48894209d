"""The docs hold together: every relative link in README.md, CHANGELOG.md, docs/*.md and
benchmarks/results/*.md points to a file of the repository (and, with ``#anchor``, to a heading of it),
every ``docs/X.md`` they name exists, README.md fits on a screen or two, and docs/CONFIG.md lists every
environment variable the product code reads and every key of the agent's config."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md"),
               *(ROOT / "benchmarks" / "results").glob("*.md")])
README_MAX_LINES = 220
PRODUCT = ("cuvil_edge", "runtime_wasm", "ota", "cuvil_agent", "device_profiles")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_DOC_MENTION = re.compile(r"(?<![\w/.])docs/[A-Za-z0-9_-]+\.md\b")


def prose(path: Path) -> str:
    """The file without its fenced code blocks (a ``# comment`` in a shell block is no heading)."""
    return _FENCE.sub("", path.read_text())


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text without markup, lowercased, punctuation dropped (but ``-``
    and ``_``), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(prose(path)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return _LINK.findall(prose(path))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_to_files_and_headings(doc):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        where, _, anchor = target.partition("#")
        dest = (doc.parent / where).resolve() if where else doc
        if not dest.exists():
            broken.append(f"{target}: no such file {dest}")
        elif not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_named_in_the_text_exist(doc):
    missing = sorted({m for m in _DOC_MENTION.findall(doc.read_text()) if not (ROOT / m).exists()})
    assert not missing, f"{doc.relative_to(ROOT)} names {missing}"


def test_the_link_checker_sees_links_and_anchors():
    """The checker itself: what a heading's anchor is, and that links in code blocks are not links."""
    assert slug("RuntimePolicy (units in the names; `from_dict` / `from_toml`, `[policy]` in `agent.toml`)") \
        == "runtimepolicy-units-in-the-names-from_dict--from_toml-policy-in-agenttoml"
    assert slug("Against issue 9's targets") == "against-issue-9s-targets"
    usage = ROOT / "docs" / "USAGE.md"
    assert "serve-on-a-device-without-a-broker" in anchors(usage)
    assert "../packaging/agent.local.toml" in links(usage)


def test_readme_fits_on_a_screen_or_two():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; depth belongs in docs/ (USAGE.md ...)"


def _env_vars_read() -> set[str]:
    """Names the product code reads from the environment as string literals."""
    pattern = re.compile(r"(?:environ\.get|environ\[|getenv)\(?\s*[\"']([A-Z][A-Z0-9_]*)[\"']")
    names = set()
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            names.update(pattern.findall(path.read_text()))
    return names


def test_every_environment_variable_the_code_reads_is_documented():
    config = (ROOT / "docs" / "CONFIG.md").read_text()
    names = _env_vars_read()
    assert {"CUVIL_CACHE_DIR", "CUVIL_HARDWARE_ID"} <= names  # the scan finds what it should
    missing = sorted(n for n in names if f"`{n}`" not in config)
    assert not missing, f"docs/CONFIG.md does not list the environment variables {missing}"


def test_every_agent_config_key_is_documented():
    from cuvil_agent import config as c
    from runtime_wasm.policy import RuntimePolicy

    text = (ROOT / "docs" / "CONFIG.md").read_text()
    sections = {"agent": c.AgentConfig, "broker": c.BrokerSettings, "limits": c.TransferLimits,
                "download": c.HttpDownloadLimits, "ota": c.OtaConfig, "serve": c.ServeLimits,
                "http": c.HttpSettings, "telemetry": c.TelemetrySettings, "models": c.ModelConfig,
                "admission": c.AdmissionSettings, "policy": RuntimePolicy}
    missing = []
    for section, cls in sections.items():
        assert f"`[{section}]`" in text or f"`[[{section}]]`" in text, f"no section [{section}]"
        for f in fields(cls):
            if cls is c.AgentConfig and f.name in sections:  # the tables themselves
                continue
            documented = (f"`{f.name}`", f"`[{section}.{f.name}]`", f"`[{section}] {f.name}`",
                          f"`[[{section}]] {f.name}`")
            if not any(d in text for d in documented):
                missing.append(f"[{section}] {f.name}")
    assert not missing, f"docs/CONFIG.md does not document {missing}"


def test_the_architecture_concept_table_names_one_file_per_concept() -> None:
    """docs/ARCHITECTURE.md's concept table: each concept owned by one path that exists (``<family>`` stands
    for a family of files that exist), each cell short enough for one line of a screen."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = text[text.index("| concept | the one file that owns it |"):].split("\n\n")[0].splitlines()[2:]
    assert len(table) > 50
    for row in table:
        concept, owner = (cell.strip() for cell in row.strip("|").split("|"))
        paths = re.findall(r"`([^`]+)`", owner)
        assert len(paths) == 1 and owner == f"`{paths[0]}`", row
        assert len(concept) <= 90, row
        pattern = paths[0].replace("<family>", "*")
        assert list(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists(), row


def test_runtime_md_lists_the_telemetry_vocabulary() -> None:
    """docs/RUNTIME.md's vocabulary table: a row per count, its key and its family as the code names them."""
    from runtime_wasm.counts import SERVING_COUNTS

    text = (ROOT / "docs" / "RUNTIME.md").read_text()
    rows = {ln.split("|")[1].strip(" `"): ln for ln in text.splitlines() if ln.startswith("| `")}
    for c in SERVING_COUNTS:
        assert c.key in rows and f"`{c.metric}" in rows[c.key], c
