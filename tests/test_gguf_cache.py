"""The .gguf conversion cache is keyed by content: a reinstalled file finds its copy, a changed file does not."""

import os

from grpo_cli.gguf import converted_dir, remove_mtime_keyed_copies


def model_file(tmp_path, name="model.gguf"):
    path = tmp_path / name
    path.write_bytes(os.urandom(5 << 20))
    return path


def test_a_reinstalled_file_with_a_new_mtime_finds_the_same_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    original = model_file(tmp_path)
    reinstalled = tmp_path / "site" / "model.gguf"
    reinstalled.parent.mkdir()
    reinstalled.write_bytes(original.read_bytes())
    os.utime(reinstalled, (1_000_000_000, 1_000_000_000))
    assert converted_dir(reinstalled) == converted_dir(original)


def test_a_file_changed_in_the_middle_is_converted_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    path = model_file(tmp_path)
    before = converted_dir(path)
    data = bytearray(path.read_bytes())
    data[len(data) * 8 // 17] ^= 0xFF  # inside one of the sampled chunks, far from the head and the tail
    path.write_bytes(bytes(data))
    assert converted_dir(path) != before


def test_copies_under_the_old_mtime_names_are_removed_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    path = model_file(tmp_path)
    size = path.stat().st_size
    cache = tmp_path / "cache" / "gguf"
    stale = [cache / f"model-{size}-1795696671", cache / f"model-{size}-1795743557"]
    kept = [converted_dir(path), cache / f"model-{size + 1}-1795696671", cache / f"other-{size}-1795696671"]
    for folder in stale + kept:
        folder.mkdir(parents=True)
    remove_mtime_keyed_copies(path)
    assert not any(folder.exists() for folder in stale)
    assert all(folder.exists() for folder in kept)
