#!/usr/bin/env bash
# Downloads mamba_ssm's source (the sdist, from PyPI through pip) and unpacks it into
# build-mamba-ssm/ (ignored by git, as every build* folder), for bench/mamba_ssm_ssd_timing.py on the GPU machine,
# which has no network: carry that folder there. Not committed: it is mamba_ssm's code.
# pip prepares an sdist's metadata even for a download, and mamba_ssm's setup.py imports torch:
# where that fails in pip's isolated build environment, the download is retried without build
# isolation (needs torch and packaging importable) and with the CUDA build skipped.
# Env: MAMBA_SSM_VERSION (default 2.3.2.post1), DEST (default build-mamba-ssm).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${MAMBA_SSM_VERSION:-2.3.2.post1}
dest=${DEST:-build-mamba-ssm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
get() { python3 -m pip download "mamba-ssm==$version" --no-deps --no-binary :all: -d "$tmp" "$@"; }
if ! get >"$tmp/log" 2>&1; then
  if ! MAMBA_SKIP_CUDA_BUILD=TRUE get --no-build-isolation >>"$tmp/log" 2>&1; then
    tail -20 "$tmp/log" >&2
    echo "fetch_mamba_ssm: pip could not download mamba-ssm $version's source (above); it" \
      "needs PyPI, and torch and packaging importable for the sdist's metadata" >&2
    exit 1
  fi
fi
sdist=$(ls "$tmp"/mamba_ssm-*.tar.gz)
rm -rf "$dest"
mkdir -p "$dest"
tar -xzf "$sdist" -C "$dest" --strip-components=1
test -f "$dest/mamba_ssm/ops/triton/ssd_combined.py"
echo "fetch_mamba_ssm: mamba_ssm $version in $dest (carry it to the GPU machine;" \
  "python3 bench/mamba_ssm_ssd_timing.py --src $dest)"
