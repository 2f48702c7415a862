#!/usr/bin/env bash
# Sourced by demo.sh and test.sh: makes sure wgpu finds an adapter. On Linux without any Vulkan
# driver it installs Mesa's software one (lavapipe) with apt-get.
icd_dirs="/usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d"
has_icd() { for d in $icd_dirs; do ls "$d"/*.json >/dev/null 2>&1 && return 0; done; return 1; }
if [ "$(uname -s)" = Linux ] && ! has_icd && command -v apt-get >/dev/null; then
  echo "no Vulkan driver found: installing the software one (mesa-vulkan-drivers)" >&2
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq && $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers >/dev/null
fi
# Mesa prints a warning when XDG_RUNTIME_DIR is unset; give it a private folder.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/wgpu-ops-runtime-$(id -u)"
  mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
fi
