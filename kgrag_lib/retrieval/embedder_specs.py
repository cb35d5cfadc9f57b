"""What an embedder spec names, and how that model embeds (pooling, similarity, query prompt).

Accepted specs, checked without loading anything:

- `minilm`, `mpnet`: the CPU models shipped inside PyPI packages, always loaded offline;
- the papers' retrievers by short name or hub id (`RECIPES`): `multi-qa-mpnet-dot` (MetaQA
  KG-RAG), `contriever-msmarco` (KG-Infused RAG), `bge-large` (SA-RAG);
- `hf:<hub id or folder>`, a local folder, or any other `org/name` hub id.

A hub id is fetched into the Hugging Face cache (or read from it with HF_HUB_OFFLINE=1); a
folder with `modules.json` is a sentence-transformers model and brings its own pooling,
any other transformers folder gets mean pooling (the Contriever convention) unless a recipe
says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kgrag_lib.errors import ConfigError

SHIPPED = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
}


@dataclass(frozen=True)
class Recipe:
    """How a paper's retriever embeds, where the model's own files do not say it all."""

    repo: str
    pooling: str | None = None       # None: the model's sentence-transformers modules; "mean" | "cls": built here
    normalize: bool | None = None    # None: unit vectors iff the model's similarity is cosine
    query_prompt: str = ""           # prefixed to queries only (passages are embedded as they are)
    source: str = ""                 # which paper uses it, and where it says so


RECIPES = {
    # KG-RAG on MetaQA (Linders & Tomczak, §3.4.3): 768-d, scored by dot product; the repo ships CLS
    # pooling and no Normalize layer but no similarity setting either, so the dot product is stated here.
    "multi-qa-mpnet-dot": Recipe("sentence-transformers/multi-qa-mpnet-base-dot-v1", normalize=False,
                                 source="MetaQA KG-RAG §3.4.3"),
    # KG-Infused RAG's released code retrieves with Contriever-MS MARCO: a plain BERT checkpoint
    # (no sentence-transformers files) whose embedding is the mean of the token states, scored by
    # an unnormalised dot product.
    "contriever-msmarco": Recipe("facebook/contriever-msmarco", pooling="mean", normalize=False,
                                 source="KG-Infused RAG (thunlp/KG-Infused-RAG)"),
    # SA-RAG §4 embeds with BAAI/bge-large-en-v1.5 (through Ollama): CLS pooling and unit vectors from
    # its own modules; its model card's instruction for short queries that retrieve passages.
    "bge-large": Recipe("BAAI/bge-large-en-v1.5", normalize=True,
                        query_prompt="Represent this sentence for searching relevant passages: ",
                        source="SA-RAG §4"),
}

_ALIASES = {
    "all-minilm-l6-v2": "minilm",
    "all-mpnet-base-v2": "mpnet",
    **{repo.lower(): key for key, repo in SHIPPED.items()},
    **{r.repo.lower(): key for key, r in RECIPES.items()},
    **{r.repo.split("/")[1].lower(): key for key, r in RECIPES.items()},
}


@dataclass(frozen=True)
class EmbedderSpec:
    """A parsed spec: `kind` "shipped" (target minilm|mpnet), "folder" (target a path) or "hub"
    (target a repo id); `recipe` when it names one of the papers' retrievers."""

    kind: str
    name: str
    target: str
    recipe: Recipe | None = None


def parse_embedder_spec(spec: object) -> EmbedderSpec:
    """Parse an embedder spec (see the module docstring); a malformed one is a ConfigError."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"embedder spec must be a non-empty string ('minilm', 'mpnet', "
                          f"{', '.join(map(repr, RECIPES))}, hf:<hub id or folder>, a folder or a hub id); got {spec!r}")
    text = spec.strip()
    explicit_hf = text.startswith("hf:")
    body = text[3:].strip() if explicit_hf else text
    if not body:
        raise ConfigError(f"embedder spec {spec!r}: expected hf:<hub id or folder> after 'hf:'")
    key = _ALIASES.get(body.lower(), body.lower())
    if key in SHIPPED and not explicit_hf:
        return EmbedderSpec("shipped", SHIPPED[key], key)
    if key in RECIPES:
        r = RECIPES[key]
        return EmbedderSpec("hub", r.repo, r.repo, r)
    path = Path(body).expanduser()
    if path.is_dir():
        return EmbedderSpec("folder", path.resolve().name, str(path.resolve()))
    if body.startswith((".", "/", "~")) or any(c.isspace() for c in body) or (not explicit_hf and body.count("/") != 1):
        raise ConfigError(
            f"embedder spec {spec!r}: not a shipped model ({', '.join(SHIPPED)}), a paper's retriever "
            f"({', '.join(RECIPES)}), an existing folder, or a hub id of the form org/name (hf:<id> for any other id)")
    return EmbedderSpec("hub", body, body)
