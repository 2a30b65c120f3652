"""A Hub spec that `extends` base files: each base (a chain, in sub-folders too) and the tensor files
its interventions read come with `yamltrace.yaml` into the same snapshot, each checked by the spec
reader before it is asked of the Hub; a hostile `extends` is a located error, never a download."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import HubTiny
import torch

from yamltrace import SpecError, load_spec, validate_spec
from yamltrace.checkpoint import SPEC_FILE, from_pretrained
from yamltrace.examples.tiny import TinyModel
from yamltrace.spec import DEFAULT_MAX_BYTES

HEAD = "yamltrace: 1\nimports: [yamltrace.examples.tiny]\n"
# Limits of a spec's chain, as docs/security.md states them.
MAX_EXTENDS_DEPTH = 16  # files in an `extends` chain, the first included
MAX_TENSOR_FILE_BYTES = 1 << 30  # one tensor file


class FakeHub:
    """A repository as a dict of files, and the snapshot huggingface_hub would download them into."""

    def __init__(self, tmp_path: Path, files: dict[str, bytes | str], snapshot: str = "snapshot") -> None:
        self.files = {name: data.encode() if isinstance(data, str) else data for name, data in files.items()}
        self.snapshot = tmp_path / snapshot
        self.snapshot.mkdir(parents=True)
        self.asked: list[str] = []
        self.revisions: list[object] = []
        self.sized: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import huggingface_hub

        monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: False)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", self.download)
        monkeypatch.setattr(huggingface_hub, "hf_hub_url", lambda repo_id, name, **options: name)
        monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", self.metadata)

    def _data(self, name: str) -> bytes:
        from huggingface_hub.errors import EntryNotFoundError

        if name not in self.files:
            raise EntryNotFoundError(f"{name} is not in the repository")
        return self.files[name]

    def metadata(self, url: str, **options: object) -> object:
        from types import SimpleNamespace

        self.sized.append(url)
        return SimpleNamespace(size=len(self._data(url)))

    def download(self, repo_id: str, filename: str, **options: object) -> str:
        self.asked.append(filename)
        self.revisions.append(options.get("revision"))
        data = self._data(filename)
        path = self.snapshot / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)


def spec_from_hub(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> Path | None:
    """Load `HubTiny` by Hub id from `hub`: the file the loaded model's spec came from (None: no spec)."""
    hub.install(monkeypatch)
    spec = getattr(from_pretrained(HubTiny, "org/steered"), "yamltrace_spec", None)
    return None if spec is None else Path(spec.source)


def tensors(**named: torch.Tensor) -> bytes:
    from safetensors.torch import save

    return save(named)


def test_a_chain_of_bases_and_their_tensor_files_come_with_the_spec(tmp_path: Path, monkeypatch) -> None:
    hub = FakeHub(
        tmp_path,
        {
            SPEC_FILE: HEAD + "extends: ./base.yaml\noutputs:\n  h: TinyDecoderLayer\n",
            "base.yaml": "yamltrace: 1\nextends: parts/steer.yaml\noutputs:\n  mlp: {target: TinyMLP}\n",
            "parts/steer.yaml": (
                "yamltrace: 1\ninterventions:\n"
                '  steer: {target: TinyDecoderLayer, layers: [1], add: {tensor: "v.safetensors:v"}}\n'
            ),
            "parts/v.safetensors": tensors(v=torch.full((32,), 2.0)),
            "unrelated.yaml": "yamltrace: 1\n",
        },
    )
    path = spec_from_hub(hub, monkeypatch)
    assert path == hub.snapshot / SPEC_FILE
    assert hub.asked == [SPEC_FILE, "base.yaml", "parts/steer.yaml", "parts/v.safetensors"]
    assert hub.sized == hub.asked[1:]  # each size asked before the download
    spec = load_spec(path)
    assert {"h", "mlp"} <= set(spec.outputs)
    assert torch.equal(spec.interventions[0].value, torch.full((32,), 2.0))
    hub.asked.clear()
    assert spec_from_hub(hub, monkeypatch) == path
    assert hub.asked == [SPEC_FILE]  # the snapshot holds the rest already


def test_a_builtin_base_is_yamltraces_own_file_never_asked_for(tmp_path: Path, monkeypatch) -> None:
    hub = FakeHub(tmp_path, {SPEC_FILE: "yamltrace: 1\nextends: builtin:llama\noutputs:\n  h: X\n"})
    with pytest.raises(SpecError, match=r"\$\.outputs\.h: "):  # X is no class of the tiny model's
        spec_from_hub(hub, monkeypatch)
    assert {"h", "hidden_states"} <= set(validate_spec(hub.snapshot / SPEC_FILE).data["outputs"])
    assert hub.asked == [SPEC_FILE]
    assert hub.sized == []


@pytest.mark.parametrize(
    ("extends", "message"),
    [
        ("../outside.yaml", "leaves the spec's folder"),
        ("/etc/base.yaml", "must be a path relative to this file"),
        ("parts/../../outside.yaml", "leaves the spec's folder"),
    ],
)
def test_a_base_out_of_the_repository_is_a_located_error_never_asked_for(
    tmp_path: Path, monkeypatch, extends: str, message: str
) -> None:
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + f"extends: {extends}\n", "outside.yaml": "yamltrace: 1\n"})
    with pytest.raises(SpecError, match=rf"yamltrace\.yaml:3:\d+: \$\.extends: .*{message}"):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE]
    assert hub.sized == []


def test_an_extends_cycle_is_a_located_error_after_the_files_of_the_chain(tmp_path: Path, monkeypatch) -> None:
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: a.yaml\n", "a.yaml": "yamltrace: 1\nextends: yamltrace.yaml\n"})
    with pytest.raises(SpecError, match=r"a\.yaml:2:\d+: \$\.extends: extends cycle: .*yamltrace\.yaml -> .*a\.yaml -> "):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE, "a.yaml"]


def test_a_chain_too_long_stops_asking_at_its_limit(tmp_path: Path, monkeypatch) -> None:
    chain = {f"b{i}.yaml": f"yamltrace: 1\nextends: b{i + 1}.yaml\n" for i in range(MAX_EXTENDS_DEPTH + 5)}
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: b0.yaml\n", **chain})
    with pytest.raises(SpecError, match=rf"\$\.extends: the extends chain is longer than {MAX_EXTENDS_DEPTH} files"):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE, *(f"b{i}.yaml" for i in range(MAX_EXTENDS_DEPTH - 1))]


def test_a_base_larger_than_the_spec_budget_is_never_downloaded(tmp_path: Path, monkeypatch) -> None:
    big = "yamltrace: 1\n" + "#" * DEFAULT_MAX_BYTES + "\n"
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: big.yaml\n", "big.yaml": big})
    with pytest.raises(
        SpecError, match=r"yamltrace\.yaml:3:\d+: \$\.extends: extends 'big\.yaml': .*big\.yaml is [\d,]+ bytes on the Hub"
    ):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE]
    assert hub.sized == ["big.yaml"]


def test_a_base_the_repository_lacks_is_the_readers_located_not_found(tmp_path: Path, monkeypatch) -> None:
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: gone.yaml\n"})
    with pytest.raises(SpecError, match=r"yamltrace\.yaml:3:\d+: \$\.extends: base spec 'gone\.yaml' not found"):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE]


def test_a_tensor_file_over_its_cap_is_never_downloaded(tmp_path: Path, monkeypatch) -> None:
    from yamltrace.errors import FolderError

    spec = HEAD + 'interventions:\n  s: {target: TinyDecoderLayer, add: {tensor: "v.safetensors:v"}}\n'
    hub = FakeHub(tmp_path, {SPEC_FILE: spec, "v.safetensors": b"\0" * (MAX_TENSOR_FILE_BYTES + 1)})
    with pytest.raises(FolderError, match=r"org/steered@main: the tensor file v\.safetensors is [\d,]+ bytes on the Hub"):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE]


def test_a_yamltrace_models_snapshot_brings_the_bases_too(tmp_path: Path, monkeypatch, tiny) -> None:
    """`snapshot_download` takes the config, weights and `yamltrace.yaml` by pattern; the bases follow by name."""
    import huggingface_hub

    from yamltrace.checkpoint import save_pretrained

    save_pretrained(tiny, tmp_path / "saved")
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: base.yaml\n", "base.yaml": "yamltrace: 1\noutputs:\n  h: TinyMLP\n"})
    hub.install(monkeypatch)

    def snapshot_download(repo_id: str, **options: object) -> str:
        for saved in (tmp_path / "saved").iterdir():
            if saved.name != SPEC_FILE:
                (hub.snapshot / saved.name).write_bytes(saved.read_bytes())
        hub.download(repo_id, SPEC_FILE)
        return str(hub.snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model = from_pretrained(TinyModel, "org/steered")
    assert Path(model.yamltrace_spec.source) == hub.snapshot / SPEC_FILE
    assert hub.asked == [SPEC_FILE, "base.yaml"]
    assert validate_spec(hub.snapshot / SPEC_FILE).data["outputs"] == {"h": "TinyMLP"}
    hub.asked.clear()
    (hub.snapshot / "base.yaml").unlink()
    with pytest.raises(SpecError, match=rf"^{hub.snapshot / SPEC_FILE}:3:\d+: \$\.extends: base spec 'base\.yaml' not found"):
        from_pretrained(TinyModel, "org/steered", local_files_only=True)
    assert hub.asked == [SPEC_FILE]  # offline: only the cache is read


def test_a_spec_that_does_not_parse_is_left_to_the_load_which_reports_every_problem(tmp_path: Path, monkeypatch) -> None:
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: base.yaml\noutputs: [\n", "base.yaml": "yamltrace: 1\n"})
    with pytest.raises(SpecError, match=r"yamltrace\.yaml:\d+:\d+: "):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE]


def test_a_yamltrace_model_by_hub_id_loads_steered_through_its_base(tmp_path: Path, monkeypatch, tiny, input_ids) -> None:
    """End to end: the checkpoint's spec extends a base whose intervention reads a tensor file."""
    import fnmatch

    import huggingface_hub

    from yamltrace.checkpoint import from_pretrained, save_pretrained
    from yamltrace.examples.tiny import TinyModel

    save_pretrained(tiny, tmp_path / "saved")
    files: dict[str, bytes | str] = {p.name: p.read_bytes() for p in (tmp_path / "saved").iterdir()}
    files[SPEC_FILE] = HEAD + "extends: steer/base.yaml\n"
    files["steer/base.yaml"] = (
        'yamltrace: 1\ninterventions:\n  s: {target: TinyDecoderLayer, layers: [1], add: {tensor: "v.safetensors:v"}}\n'
    )
    files["steer/v.safetensors"] = tensors(v=torch.full((32,), 0.25))
    hub = FakeHub(tmp_path, files)
    hub.install(monkeypatch)

    def snapshot_download(repo_id: str, allow_patterns: list[str], **options: object) -> str:
        for name in hub.files:
            if any(fnmatch.fnmatch(name, p) for p in allow_patterns) and not name.startswith("steer/"):
                hub.download(repo_id, name)
        return str(hub.snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model = from_pretrained(TinyModel, "org/steered")
    assert "steer/base.yaml" in hub.asked and "steer/v.safetensors" in hub.asked
    with torch.no_grad():
        edited, plain = model(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state
    assert not torch.equal(edited, plain)
    assert torch.equal(model.yamltrace_spec.interventions[0].value, torch.full((32,), 0.25))


def test_the_files_beside_the_spec_come_from_its_snapshots_commit(tmp_path: Path, monkeypatch) -> None:
    """The branch may move between two downloads: the bases are asked at the commit the spec came from."""
    files = {SPEC_FILE: HEAD + "extends: base.yaml\n", "base.yaml": "yamltrace: 1\n"}
    hub = FakeHub(tmp_path, files, snapshot="hub/models--org--steered/snapshots/0a1b2c")
    spec_from_hub(hub, monkeypatch)
    assert list(zip(hub.asked, hub.revisions)) == [(SPEC_FILE, None), ("base.yaml", "0a1b2c")]


def test_a_fetched_base_that_links_out_of_the_folder_is_refused_unread(tmp_path: Path, monkeypatch) -> None:
    """Whatever a download leaves in the snapshot is checked again: a link out is never read."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("yamltrace: 1\noutputs:\n  leaked: Secret\n", encoding="utf-8")
    hub = FakeHub(tmp_path, {SPEC_FILE: HEAD + "extends: base.yaml\n", "base.yaml": "yamltrace: 1\n"})
    download = hub.download

    def linking(repo_id: str, filename: str, **options: object) -> str:
        if filename != "base.yaml":
            return download(repo_id, filename, **options)
        (hub.snapshot / filename).symlink_to(secret)
        return str(hub.snapshot / filename)

    hub.download = linking  # type: ignore[method-assign]
    with pytest.raises(SpecError, match=r"yamltrace\.yaml:3:\d+: \$\.extends: .*links out of the spec's folder") as e:
        spec_from_hub(hub, monkeypatch)
    assert "leaked" not in str(e.value)


def test_a_tensor_file_the_repository_lacks_is_the_loads_located_error(tmp_path: Path, monkeypatch) -> None:
    spec = HEAD + 'interventions:\n  s: {target: TinyDecoderLayer, add: {tensor: "gone.safetensors:v"}}\n'
    hub = FakeHub(tmp_path, {SPEC_FILE: spec})
    with pytest.raises(
        SpecError, match=r"yamltrace\.yaml:4:\d+: \$\.interventions\.s\.add\.tensor: .*gone\.safetensors.*not found"
    ):
        spec_from_hub(hub, monkeypatch)
    assert hub.asked == [SPEC_FILE] and hub.sized == ["gone.safetensors"]


def _hub_cache(tmp_path: Path, spec: str) -> Path:
    """A Hub cache repository offline: `snapshots/rev/yamltrace.yaml` and `base.yaml` linking into `blobs/`,
    where the base spec's blob is `blobs/basehash`."""
    repo = tmp_path / "models--org--steered"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "rev"
    blobs.mkdir(parents=True), snapshot.mkdir(parents=True)
    (blobs / "spechash").write_text(spec, encoding="utf-8")
    (blobs / "basehash").write_text(HEAD + "outputs: {mlp: TinyMLP}\n", encoding="utf-8")
    (snapshot / SPEC_FILE).symlink_to("../../blobs/spechash")
    (snapshot / "base.yaml").symlink_to("../../blobs/basehash")
    return snapshot / SPEC_FILE


def test_offline_a_base_named_through_blobs_is_refused_and_one_linked_in_the_snapshot_reads(tmp_path: Path) -> None:
    """docs/security.md: in the Hub cache, extends resolves beside the link, never in `blobs/`."""
    spec = _hub_cache(tmp_path, HEAD + "extends: ../../blobs/basehash\n")
    with pytest.raises(
        SpecError, match=r"yamltrace\.yaml:3:\d+: \$\.extends: extends '\.\./\.\./blobs/basehash' leaves the spec's folder"
    ):
        load_spec(spec)
    linked = _hub_cache(tmp_path / "again", HEAD + "extends: base.yaml\n")
    assert list(load_spec(linked).outputs) == ["mlp"]
