"""The Pages workflow builds with `sparkboard build` and deploys with GitHub's Pages actions."""

from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "pages.yml"


def test_pages_workflow_builds_and_deploys_without_a_branch() -> None:
    wf = yaml.safe_load(WORKFLOW.read_text())
    steps = wf["jobs"]["build"]["steps"] + wf["jobs"]["deploy"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert "actions/upload-pages-artifact" in uses and "actions/deploy-pages" in uses
    runs = " ".join(s.get("run", "") for s in steps)
    assert "sparkboard build --db" in runs and "--out _site" in runs
    assert "git push" not in runs and not any("gh-pages" in u for u in uses)
    assert wf["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
