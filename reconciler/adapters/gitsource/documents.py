"""Parsed documents cached by blob SHA, and a snapshot turned into a desired state.

`DocumentCache` remembers the parse result of every blob it has seen, so planning a new
commit parses only the files whose content changed. `load_snapshot` reads the repo policy
(`.dockyard.yml`), selects the config files it names, parses the new blobs and calls the
pure `reconciler.core.loading.load_desired`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.adapters.gitsource.snapshots import Snapshot
from reconciler.core.loading import ConfigParser, Document, load_desired, parse_document
from reconciler.core.policy import RepoPolicy, parse_policy
from reconciler.domain.desired import DesiredState
from reconciler.domain.issues import ConfigIssue
from schemas.limits import DEFAULT_LIMITS, ConfigLimits, size_problem

BlobReader = Callable[[Sequence[str]], Mapping[str, bytes]]
"""Reads blobs by SHA, many at once (one `git cat-file --batch` for a whole commit)."""
BlobSizer = Callable[[Sequence[str]], Mapping[str, int]]
"""The sizes of blobs by SHA, from their headers: a blob over the limit is never read."""


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """A commit's desired state and the policy it was loaded under."""

    desired: DesiredState
    policy: RepoPolicy


class DocumentCache:
    """Parse results by blob SHA; bounded, cleared whole when full."""

    def __init__(
        self,
        parse: ConfigParser,
        *,
        max_entries: int = 100_000,
        limits: ConfigLimits = DEFAULT_LIMITS,
    ) -> None:
        self._parse = parse
        self.limits = limits  # `max_bytes`: blobs above it are refused unread
        self._max = max_entries
        self._documents: dict[str, Document] = {}
        self._policies: dict[str, RepoPolicy | list[ConfigIssue]] = {}
        self.parsed = 0
        """How many documents were actually parsed (not served from the cache)."""

    @property
    def parse(self) -> ConfigParser:
        return self._parse

    def missing(self, blobs: Sequence[str]) -> list[str]:
        """The blobs among `blobs` that were never parsed, without duplicates."""
        return list(dict.fromkeys(blob for blob in blobs if blob not in self._documents))

    def oversized(self, blobs: Sequence[str], sizes: BlobSizer) -> dict[str, int]:
        """The sizes of the blobs among `blobs` over `limits.max_bytes` (not to be read)."""
        if not blobs:
            return {}
        limit = self.limits.max_bytes
        return {blob: size for blob, size in sizes(blobs).items() if size > limit}

    def document(
        self, path: str, blob: str, texts: Mapping[str, bytes], oversized: Mapping[str, int]
    ) -> Document:
        """The parsed document of `blob` at `path`; `texts` holds the blobs not cached,
        `oversized` the sizes of those too large to read (a document with the issue)."""
        cached = self._documents.get(blob)
        if cached is None:
            if len(self._documents) >= self._max:
                self._documents.clear()
            if blob in oversized:
                cached = Document(path=path, issues=(self._too_large(path, oversized[blob]),))
            else:
                cached = parse_document(texts[blob], path, self._parse)
            self._documents[blob] = cached
            self.parsed += 1
        return cached.at(path)

    def policy(
        self, path: str, blob: str | None, read: BlobReader, sizes: BlobSizer | None = None
    ) -> RepoPolicy | list[ConfigIssue]:
        if blob is None:
            return RepoPolicy()
        cached = self._policies.get(blob)
        if cached is None:
            too_large = self.oversized([blob], sizes) if sizes is not None else {}
            if too_large:
                cached = [self._too_large(path, too_large[blob])]
            else:
                cached = parse_policy(read([blob])[blob], path)
            self._policies[blob] = cached
        return cached

    def _too_large(self, path: str, size: int) -> ConfigIssue:
        problem = size_problem(size, path, self.limits)
        assert problem is not None  # only called for blobs over the limit
        return ConfigIssue(path, 1, 1, None, f"{problem.message} ({problem.hint})")


LINK_MESSAGE = (
    "the file is a symbolic link: Dockyard never reads a link's target in a config repo; "
    "commit the configuration itself"
)


def load_snapshot(
    snapshot: Snapshot,
    read: BlobReader,
    cache: DocumentCache,
    sizes: BlobSizer | None = None,
    default_project: str | None = None,
) -> LoadedSnapshot:
    """The desired state of `snapshot`, parsing only blobs the cache has not seen; with
    `sizes`, blobs over the cache's `limits.max_bytes` are refused by size, never read.
    `default_project`: the project when `.dockyard.yml` names none (a source's project;
    None: `main`)."""
    policy_path = snapshot.policy_path
    found = cache.policy(policy_path, snapshot.files.get(policy_path), read, sizes)
    issues: list[ConfigIssue] = []
    if isinstance(found, RepoPolicy):
        policy = found
        if default_project is not None and "project" not in policy.model_fields_set:
            policy = policy.model_copy(update={"project": default_project})
    else:
        policy, issues = RepoPolicy(), list(found)
    issues += [
        ConfigIssue(path, None, None, None, LINK_MESSAGE)
        for path in sorted(snapshot.links)
        if path == policy_path or policy.is_config_path(snapshot.relative(path))
    ]
    selected = [
        (path, blob)
        for path, blob in snapshot.files.items()
        if path != policy_path and policy.is_config_path(snapshot.relative(path))
    ]
    missing = cache.missing([blob for _, blob in selected])
    oversized = cache.oversized(missing, sizes) if sizes is not None else {}
    readable = [blob for blob in missing if blob not in oversized]
    texts = read(readable) if readable else {}
    documents = [cache.document(path, blob, texts, oversized) for path, blob in selected]
    desired = load_desired(
        documents, commit=snapshot.commit, policy=policy, parse=cache.parse, issues=issues
    )
    return LoadedSnapshot(desired=desired, policy=policy)
