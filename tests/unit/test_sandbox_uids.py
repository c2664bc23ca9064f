"""Per-sandbox uids: held by a lock file, so that no two processes on the host draw the same one."""

from __future__ import annotations

from environments.rollout.sandbox.uids import UidRegistry


def test_a_uid_held_by_one_registry_is_not_given_by_another(tmp_path):
    # Two registries hold their locks through separate open files, exactly as two processes would.
    first, second = UidRegistry(tmp_path), UidRegistry(tmp_path)
    a = first.reserve(5000, 2)
    b = second.reserve(5000, 2)
    assert {a, b} == {5000, 5001}
    assert first.reserve(5000, 2) is None and second.reserve(5000, 2) is None
    first.release(a)
    assert not (tmp_path / f"{a}.lock").exists()
    assert second.reserve(5000, 2) == a
    assert second.held() == {a, b}


def test_a_lock_file_removed_between_open_and_lock_is_not_trusted(tmp_path, monkeypatch):
    registry = UidRegistry(tmp_path)
    import environments.rollout.sandbox.uids as module

    real_flock = module.fcntl.flock

    def flock_after_removal(fd, op):
        (tmp_path / "7000.lock").unlink(missing_ok=True)  # a releaser removed it meanwhile
        real_flock(fd, op)

    monkeypatch.setattr(module.fcntl, "flock", flock_after_removal)
    assert registry.reserve(7000, 1) is None
