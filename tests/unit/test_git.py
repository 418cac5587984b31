"""Shallow checkouts of a tag and of a bare commit SHA, from a local repository."""
import subprocess

from backends.steps.git import checkout


def _repo(tmp_path):
    repo = tmp_path / "upstream"
    repo.mkdir()
    env_git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for n in (1, 2):
        (repo / "f.txt").write_text(f"v{n}\n")
        subprocess.run([*env_git, "add", "f.txt"], check=True)
        subprocess.run([*env_git, "commit", "-q", "-m", f"v{n}"], check=True)
        subprocess.run([*env_git, "tag", f"v{n}"], check=True)
    first = subprocess.run(["git", "-C", str(repo), "rev-parse", "v1"], capture_output=True, text=True,
                           check=True).stdout.strip()
    return repo, first


def test_checkout_a_tag_and_a_sha(tmp_path):
    repo, first = _repo(tmp_path)
    url = f"file://{repo}"
    tagged = checkout(url, "v2", tmp_path / "a" / "src", submodules=False, log=tmp_path / "a.log", label="git")
    assert (tmp_path / "a/src/f.txt").read_text() == "v2\n" and len(tagged) == 40
    pinned = checkout(url, first, tmp_path / "b" / "src", submodules=False, log=tmp_path / "b.log", label="git")
    assert pinned == first and (tmp_path / "b/src/f.txt").read_text() == "v1\n"
