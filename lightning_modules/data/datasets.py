"""Named datasets: where each ``data.dataset`` lies on disk, fetched or generated there when it can be.

``dir`` and ``multi30k`` read ``data.path``; ``generated`` is the built-in corpus (generated/), written into the
cache on first use; ``wmt14-en-de`` fetches dev/test with sacreBLEU (and training text with Hugging Face
``datasets``) when online, otherwise the error lists the files to place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..atomic import atomic_open
from ..config import DataConfig
from .cache import DEFAULT_CACHE_DIR, default_cache_dir
from .corpus import CorpusError, PathLike, read_lines
from .generated import write_corpus

WMT14_DEFAULT = DEFAULT_CACHE_DIR / "wmt14-en-de"
WMT14_SPLITS = {"train": "train", "dev": "newstest2013", "test": "newstest2014"}
# Lines of the paper's dev and test sets (newstest2013; the full newstest2014, not sacreBLEU's filtered 2,737): a
# placed file of another length is another set, and its BLEU would not be comparable with the paper's.
WMT14_LINES = {"newstest2013": 3000, "newstest2014": 3003}


def generated_corpus_dir(data_cfg: DataConfig) -> Path:
    """Where the built-in corpus of these generator settings lives: always the cache, never a user's directory."""
    name = f"generated-{data_cfg.generated_pairs}-{data_cfg.generated_seed}"
    if data_cfg.generated_lexicon_scale != 1:
        name += f"-lexicon{data_cfg.generated_lexicon_scale}"
    return default_cache_dir(data_cfg) / "corpus" / name


def default_split_names(data_cfg: DataConfig) -> tuple[str, Optional[str], Optional[str]]:
    """(train, dev, test) split names: the config's, else the dataset's own (WMT14: newstest2013/2014)."""
    dev, test = data_cfg.dev_split, data_cfg.test_split
    if data_cfg.dataset == "wmt14-en-de":
        dev = dev or WMT14_SPLITS["dev"]
        test = test or WMT14_SPLITS["test"]
    return data_cfg.train_split, dev, test


def dataset_directory(data_cfg: DataConfig, download: bool = True) -> Path:
    """The directory holding ``data_cfg.dataset``'s ``{split}.{lang}`` files.

    With ``download`` (the default) what is missing is obtained where it can be: the built-in corpus is generated
    into the cache, WMT14 fetched. ``download=False`` only looks (a report reading records changes nothing).
    """
    kind = data_cfg.dataset
    if kind in ("dir", "multi30k"):
        path = Path(data_cfg.path).expanduser()  # config validation guarantees a path
        if not path.is_dir():
            raise CorpusError(f"data.path = {str(path)!r} (dataset={kind!r}) does not exist")
        return path
    if kind == "generated":
        # Only ever in the cache: a user's corpus directory is read, never generated into.
        path = generated_corpus_dir(data_cfg)
        if download:  # write_corpus leaves files whose manifest records these settings alone
            return write_corpus(
                path,
                train_pairs=data_cfg.generated_pairs,
                seed=data_cfg.generated_seed,
                lexicon_scale=data_cfg.generated_lexicon_scale,
            )
        expected = [path / f"{data_cfg.train_split}.{lang}" for lang in (data_cfg.src_lang, data_cfg.tgt_lang)]
        missing = [str(p) for p in expected if not p.is_file()]
        if missing:
            raise CorpusError(
                f"dataset='generated': the generated corpus is not in {path} yet (missing "
                f"{', '.join(missing)}); a training run generates it there"
            )
        return path
    if kind == "wmt14-en-de":
        path = Path(data_cfg.path).expanduser() if data_cfg.path else WMT14_DEFAULT.expanduser()
        return ensure_wmt14(path, data_cfg.src_lang, data_cfg.tgt_lang, download=download)
    raise CorpusError(f"data.dataset = {kind!r}: unknown dataset")


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    """One line per item (newlines inside an item become spaces), written as they come, atomically."""
    with atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line.replace("\n", " ").strip() + "\n")


def _fetch_sacrebleu(test_set: str, directory: Path, split: str) -> None:
    """Write ``{split}.en`` / ``{split}.de`` from sacreBLEU's ``test_set`` (en-de: source English, reference German)."""
    from sacrebleu.dataset import DATASETS

    dataset = DATASETS[test_set]
    src = read_lines(dataset.get_source_file("en-de"))
    ref = read_lines(dataset.get_reference_files("en-de")[0])
    if len(src) != len(ref) or not src:
        raise CorpusError(f"sacreBLEU {test_set}: {len(src)} source vs {len(ref)} reference lines")
    _write_lines(directory / f"{split}.de", ref)
    _write_lines(directory / f"{split}.en", src)


def _fetch_hf_train(directory: Path) -> None:
    """Write train.en / train.de from Hugging Face ``datasets`` ("wmt14", "de-en"), when it is installed and online."""
    try:
        import datasets  # optional: the `wmt` extra
    except ImportError:
        raise CorpusError(
            "the WMT14 training data is fetched with Hugging Face `datasets`, which is not installed: "
            "pip install 'attention-ablations[wmt]' (or place train.en / train.de yourself)"
        ) from None

    train = datasets.load_dataset("wmt14", "de-en", split="train")
    pairs = train["translation"]
    _write_lines(directory / "train.de", (p["de"] for p in pairs))
    _write_lines(directory / "train.en", (p["en"] for p in pairs))


def wmt14_instructions(directory: Path, missing: Sequence[Path]) -> str:
    """What to place where, for the missing WMT14 files only."""
    lines = [
        f"WMT14 En-De is incomplete in {directory}; place these files (plain UTF-8 text, one sentence per line, "
        "untokenized, .en and .de line-aligned):"
    ]
    lines += [f"  {path}" for path in missing]
    splits = {path.name.rsplit(".", 1)[0] for path in missing}
    lines.append("where:")
    if "train" in splits:
        lines += [
            "  train.{en,de}: the WMT14 En-De training data (Europarl v7 + Common Crawl + News Commentary v9, ~4.5M",
            "      pairs), e.g. from fairseq's examples/translation/prepare-wmt14en2de.sh before tokenization, or",
            "      Hugging Face datasets.load_dataset('wmt14', 'de-en', split='train');",
        ]
    for split, test_set, what in (
        ("newstest2013", "wmt13", "dev, 3,000 lines"),
        ("newstest2014", "wmt14/full", "test, the full 3,003 lines"),
    ):
        if split in splits:
            lines += [
                f"  {split}.{{en,de}} ({what}): sacrebleu -t {test_set} -l en-de --echo src > {directory / (split + '.en')}",
                f"      and sacrebleu -t {test_set} -l en-de --echo ref > {directory / (split + '.de')};",
            ]
    lines.append("or set data.path to a directory that already holds them.")
    return "\n".join(lines)


def ensure_wmt14(directory: PathLike, src_lang: str = "en", tgt_lang: str = "de", download: bool = True) -> Path:
    """Make sure ``directory`` holds train / newstest2013 / newstest2014 ``.{en,de}``; fetch what can be fetched.

    Dev and test come from sacreBLEU (``wmt13`` and ``wmt14/full``), training text from Hugging Face ``datasets``
    if importable; both only when online. Anything still missing raises ``CorpusError`` listing the files.
    """
    directory = Path(directory).expanduser()
    if {src_lang, tgt_lang} != {"en", "de"}:
        raise CorpusError(
            f"dataset='wmt14-en-de' needs languages en and de, got src_lang={src_lang!r}, tgt_lang={tgt_lang!r}"
        )

    def missing() -> list[Path]:
        return [
            directory / f"{split}.{lang}"
            for split in WMT14_SPLITS.values()
            for lang in ("en", "de")
            if not (directory / f"{split}.{lang}").is_file()
        ]

    problems: list[str] = []
    if missing() and download:
        directory.mkdir(parents=True, exist_ok=True)
        for test_set, split in (("wmt13", WMT14_SPLITS["dev"]), ("wmt14/full", WMT14_SPLITS["test"])):
            if any(p.name.startswith(split + ".") for p in missing()):
                try:
                    _fetch_sacrebleu(test_set, directory, split)
                except (Exception, SystemExit) as e:  # sacreBLEU calls sys.exit on failed downloads
                    problems.append(f"sacreBLEU {test_set}: {type(e).__name__}: {e}")
        if any(p.name.startswith("train.") for p in missing()):
            try:
                _fetch_hf_train(directory)
            except (Exception, SystemExit) as e:
                problems.append(f"Hugging Face datasets wmt14: {type(e).__name__}: {e}")
    still = missing()
    if still:
        message = wmt14_instructions(directory, still)
        if problems:
            message += "\n(automatic download failed: " + "; ".join(problems) + ")"
        raise CorpusError(message)
    for split, expected in WMT14_LINES.items():
        for lang in ("en", "de"):
            path = directory / f"{split}.{lang}"
            with open(path, "rb") as handle:
                lines = sum(1 for _ in handle)
            if lines != expected:
                raise CorpusError(
                    f"{path}: {lines:,} lines, expected {expected:,} ({split}"
                    + (
                        ", the full set (sacreBLEU wmt14/full), not the filtered 2,737 lines"
                        if expected == 3003
                        else ""
                    )
                    + "); replace the file, or delete it to fetch it again"
                )
    return directory
