"""wandb project, entity and tags are settable (flags or environment) and reach the logger and child runs."""

from __future__ import annotations

import os

from ablations import cli
from ablations.tracking import ENTITY_ENV, PROJECT, PROJECT_ENV, TAGS_ENV, _make_logger
from lightning_modules.config import RunConfig


def test_the_flags_become_the_environment_the_runs_read_and_are_restored(monkeypatch):
    monkeypatch.delenv(PROJECT_ENV, raising=False)
    args = cli.build_parser().parse_args(
        [
            "train",
            "--sweep",
            "sweeps/smoke.yaml",
            "--row",
            "base",
            "--scale",
            "tiny",
            "--wandb-project",
            "mine",
            "--wandb-entity",
            "lab",
            "--wandb-tags",
            "rope,try2",
        ]
    )
    assert cli.command_environment(args) == {PROJECT_ENV: "mine", ENTITY_ENV: "lab", TAGS_ENV: "rope,try2"}
    seen = {}
    monkeypatch.setattr(args, "handler", lambda a: seen.update(project=os.environ.get(PROJECT_ENV)) or 0)
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": lambda self, argv: args})())
    assert cli.main([]) == 0 and seen["project"] == "mine"
    assert PROJECT_ENV not in os.environ  # restored after the command


def test_the_logger_takes_project_entity_and_tags_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(PROJECT_ENV, "mine")
    monkeypatch.setenv(ENTITY_ENV, "lab")
    monkeypatch.setenv(TAGS_ENV, "rope, ,try2")
    logger = _make_logger(tmp_path, RunConfig(), {"sweep": "s", "scale": "tiny", "row": "base"}, "disabled")
    kwargs = logger._wandb_init
    assert (kwargs["project"], kwargs["entity"]) == ("mine", "lab")
    assert kwargs["tags"] == ["s", "tiny", "rope", "try2"]
    monkeypatch.delenv(PROJECT_ENV)
    monkeypatch.delenv(ENTITY_ENV)
    kwargs = _make_logger(tmp_path, RunConfig(), {}, "disabled")._wandb_init
    assert kwargs["project"] == PROJECT and kwargs["entity"] is None
