"""The README's first command, `cuvil-edge demo`, end to end: build, device load, check vs onnxruntime,
sign, publish over MQTT, install and serve through a cuvil-agent."""

from __future__ import annotations

from cuvil_edge.cli import main


def test_demo_runs_the_whole_pipeline(tmp_path, capsys):
    assert main(["demo", "--workdir", str(tmp_path), "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "-> match" in out
    assert "golden output matches" in out
    assert out.rstrip().endswith("demo OK")
    assert (tmp_path / "mobilenet_v2_like.cuvil" / "model.json").exists()
