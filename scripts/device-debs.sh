#!/usr/bin/env bash
# scripts/device-debs.sh - on a Debian 12 machine with its package mirror (this development
# machine), download into .debs/ the libraries scripts/device-check.sh needs on a GPU machine that
# has CUDA but none of Debian's -dev packages (libyaml, cJSON, OpenBLAS, Criterion and what they
# load). No root needed; about 14 MB. Then run the check there carrying .debs, e.g. through the
# device tool: carry [".debs"], command "scripts/device-check.sh".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .debs
cd .debs
apt-get download \
  libyaml-0-2 libyaml-dev libcjson1 libcjson-dev \
  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 \
  libcriterion3 libcriterion-dev libnanomsg5 libgit2-1.5 libhttp-parser2.9 \
  libmbedtls14 libmbedx509-1 libmbedcrypto7 libssh2-1 libffi8 libprotobuf-c1 libboxfort-dev
echo "device-debs: $(ls ./*.deb | wc -l) packages in $(pwd) ($(du -sh . | cut -f1))"
