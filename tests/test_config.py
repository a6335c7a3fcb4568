"""The settings object: environment, TOML file, validation, and the README's table."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from verilive.config import RENAMED, Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERILIVE_VOICE_PORT", "9001")
    monkeypatch.setenv("VERILIVE_LICENSE_EXPIRATION_DATE", "2030-01-02")
    monkeypatch.setenv("VERILIVE_MODEL_MIRROR", "")
    s = Settings()
    assert s.voice_port == 9001 and s.face_port == 8080 and s.capture_port == 8082
    assert s.license_expiration_date == dt.date(2030, 1, 2)
    assert s.model_mirror is None


def test_toml_file_and_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "verilive.toml"
    cfg.write_text('face_port = 7000\nvoice_port = 7001\nlog_level = "DEBUG"\n')
    monkeypatch.setenv("VERILIVE_CONFIG", str(cfg))
    monkeypatch.setenv("VERILIVE_VOICE_PORT", "7101")
    s = Settings()
    assert s.face_port == 7000  # from the file
    assert s.voice_port == 7101  # the environment wins
    assert s.log_level == "DEBUG"


def test_missing_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VERILIVE_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ValueError, match="not a file"):
        Settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [("VERILIVE_FACE_PORT", "70000"), ("VERILIVE_MAX_BODY_BYTES", "0"), ("VERILIVE_LOG_LEVEL", "LOUD")],
)
def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_every_setting_is_in_the_readme_table() -> None:
    documented = set(re.findall(r"^\| `VERILIVE_([A-Z0-9_]+)` \|", README.read_text(), flags=re.M))
    fields = {name.upper() for name in Settings.model_fields}
    assert fields - documented == set(), "settings missing from the README configuration table"
    assert documented - fields == set(), "README documents settings that do not exist"


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("off", "off"),
        ("use", "use"),
        ("require", "require"),
        ("REQUIRE", "require"),
        # The boolean values of the releases before issue 43 keep their meaning.
        ("true", "use"),
        ("True", "use"),
        ("1", "use"),
        ("false", "off"),
        ("0", "off"),
    ],
)
def test_face_motion3d_modes_and_old_boolean_values(
    monkeypatch: pytest.MonkeyPatch, value: str, mode: str
) -> None:
    monkeypatch.setenv("VERILIVE_FACE_MOTION3D", value)
    assert Settings().face_motion3d == mode


def test_face_motion3d_defaults_to_use_and_refuses_other_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("VERILIVE_FACE_MOTION3D", raising=False)
    monkeypatch.delenv("VERILIVE_CONFIG", raising=False)
    assert Settings().face_motion3d == "use"
    # A TOML file's real booleans too.
    cfg = tmp_path / "verilive.toml"
    cfg.write_text("face_motion3d = false\n")
    monkeypatch.setenv("VERILIVE_CONFIG", str(cfg))
    assert Settings().face_motion3d == "off"
    cfg.write_text("face_motion3d = true\n")
    assert Settings().face_motion3d == "use"
    cfg.write_text('face_motion3d = "require"\n')
    assert Settings().face_motion3d == "require"
    for bad in ("maybe", "2", "strict"):
        monkeypatch.setenv("VERILIVE_FACE_MOTION3D", bad)
        with pytest.raises(ValidationError):
            Settings()


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_renamed_settings_still_read_their_old_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, old: str, new: str
) -> None:
    """Issue 45: two capture settings renamed for what they mean; deployments that set the old
    variables or TOML keys keep their values, and the new name wins when both are set."""
    assert getattr(Settings(), new) != 321
    monkeypatch.setenv(f"VERILIVE_{old.upper()}", "321")
    assert getattr(Settings(), new) == 321
    monkeypatch.setenv(f"VERILIVE_{new.upper()}", "654")
    assert getattr(Settings(), new) == 654
    monkeypatch.delenv(f"VERILIVE_{old.upper()}")
    monkeypatch.delenv(f"VERILIVE_{new.upper()}")
    toml = tmp_path / "verilive.toml"
    toml.write_text(f"{old} = 987\n")
    monkeypatch.setenv("VERILIVE_CONFIG", str(toml))
    assert getattr(Settings(), new) == 987
    assert getattr(Settings(**{new: 12}), new) == 12
