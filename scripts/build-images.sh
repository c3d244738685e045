#!/usr/bin/env bash
# Builds the two OCI image archives the `cri` runtime backend imports into its private containerd,
# from Debian's static busybox and nothing else (no registry, no docker):
#   OUT_DIR/pause.tar    tandem.local/pause:1    the sandbox process: a shell loop that reaps
#                                                orphans and exits on SIGTERM
#   OUT_DIR/busybox.tar  tandem.local/busybox:1  busybox with every applet linked in /bin
#                                                (wget through a wrapper, and -T mended: see
#                                                below),
#                                                /var/www/index.html, Cmd ["/bin/sh"]
# Usage: scripts/build-images.sh [OUT_DIR]   (default target/images)
# The archives are reproducible byte for byte (fixed mtimes, owners and JSON) and are not rebuilt
# while they are newer than /bin/busybox and this script. See docs/cri-on-this-machine.md, section 4.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
script="$repo/scripts/build-images.sh"
out_dir=${1:-$repo/target/images}
busybox=/bin/busybox

[ -x "$busybox" ] || { echo "build-images: $busybox is missing; run scripts/install-deps.sh" >&2; exit 1; }

up_to_date() {
  local f
  for f in "$out_dir/pause.tar" "$out_dir/busybox.tar"; do
    [ -f "$f" ] && [ "$f" -nt "$busybox" ] && [ "$f" -nt "$script" ] || return 1
  done
}
if up_to_date; then
  exit 0
fi

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) echo "build-images: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac

mkdir -p "$out_dir"
work=$(mktemp -d "$out_dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A tar with nothing of the build machine in it: sorted names, mtime 0, root owner, no atime/ctime
# and no pid in the pax header names.
repro_tar() { # repro_tar DIR OUT.tar ENTRY...
  local dir=$1 out=$2
  shift 2
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$dir" -cf "$out" "$@"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# Moves FILE into LAYOUT's blob store and prints its hex digest.
add_blob() { # add_blob LAYOUT FILE
  local digest
  digest=$(sha256 "$2")
  mkdir -p "$1/blobs/sha256"
  mv "$2" "$1/blobs/sha256/$digest"
  echo "$digest"
}

# The files both images share: busybox, a minimal passwd/group and the usual mount points.
base_rootfs() { # base_rootfs DIR
  local root=$1
  mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/root" \
    "$root/var/www"
  cp "$busybox" "$root/bin/busybox"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  find "$root" -type d -exec chmod 0755 {} +
  chmod 0755 "$root/bin/busybox"
  chmod 0644 "$root/etc/passwd" "$root/etc/group"
  chmod 1777 "$root/tmp"
  chmod 0700 "$root/root"
}

# Builds OUT_DIR/NAME.tar, an OCI layout with one single-layer image called IMAGE.
# CONFIG_PROCESS is the JSON members for Entrypoint/Cmd inside the image config's "config".
build_image() { # build_image NAME IMAGE ROOTFS CONFIG_PROCESS
  local name=$1 image=$2 rootfs=$3 process=$4
  local layout="$work/$name-layout"
  mkdir -p "$layout"

  repro_tar "$rootfs" "$work/layer.tar" .
  local diff_id
  diff_id=$(sha256 "$work/layer.tar")
  gzip -n -9 "$work/layer.tar"
  local layer_size layer_digest
  layer_size=$(size "$work/layer.tar.gz")
  layer_digest=$(add_blob "$layout" "$work/layer.tar.gz")

  printf '{"created":"1970-01-01T00:00:00Z","architecture":"%s","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"tandem scripts/build-images.sh"}]}' \
    "$arch" "$process" "$diff_id" >"$work/config.json"
  local config_size config_digest
  config_size=$(size "$work/config.json")
  config_digest=$(add_blob "$layout" "$work/config.json")

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$work/manifest.json"
  local manifest_size manifest_digest
  manifest_size=$(size "$work/manifest.json")
  manifest_digest=$(add_blob "$layout" "$work/manifest.json")

  # `ctr images import` names the image after io.containerd.image.name.
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest_digest" "$manifest_size" "$arch" "$image" "${image##*:}" >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  find "$layout" -type d -exec chmod 0755 {} +
  find "$layout" -type f -exec chmod 0644 {} +

  repro_tar "$layout" "$work/$name.tar" oci-layout index.json blobs
  mv "$work/$name.tar" "$out_dir/$name.tar"
  echo "build-images: $out_dir/$name.tar is $image (manifest sha256:$manifest_digest)"
}

# pause: reaps orphans (it is PID 1 of a shared PID namespace) and exits at once on TERM/INT.
base_rootfs "$work/pause-rootfs"
build_image pause tandem.local/pause:1 "$work/pause-rootfs" \
  '"Entrypoint":["/bin/busybox","sh","-c","trap \"exit 0\" TERM INT; while :; do /bin/busybox sleep 3600 & wait $!; done"]'

# `wget -T SEC` crashed (SIGSEGV, exit 139) whatever the URL, literal IP or name, in a pod, a
# chroot or on the host alike: nothing to do with the container's /etc files or NSS. Debian builds
# busybox 1.35.0-4 (busybox and busybox-static) without FEATURE_WGET_TIMEOUT, but wget's option
# string still declares -T as a number option ("^cqSO:o:P:Y:U:T:+t:n::", the "+" after "T:") and
# hands getopt32 a NULL destination for it; getopt32 stores number options without checking for
# NULL (string options it does check), so `-T 5` writes to address 0 (the kernel logs "segfault
# at 0 ... error 6"). Checks that "worked on the host" ran GNU wget, which comes first in PATH there.
# The fix has two parts, both only in the busybox image (pause keeps Debian's binary untouched):
# - The image's copy of busybox gets that one option string rewritten to "^cqSO:o:P:Y:U:T:t:n:::":
#   -T becomes a string option with the NULL destination getopt32 does check, so busybox wget
#   accepts and ignores -T SEC, as it ignores -t; the extra ":" keeps the length and means nothing
#   to getopt32 or to glibc's getopt, and every option keeps its bit. This covers every way of
#   reaching the applet: busybox's sh runs applets itself (FEATURE_SH_STANDALONE) without looking
#   at /bin, and so do `busybox wget`, env, xargs and the like. patch_wget_timeout checks the bytes
#   and does nothing for a busybox whose wget has the option (its --help then shows -T SEC).
# - /bin/wget is a wrapper instead of a link, so that what runc or kubectl exec start by path gets
#   a real timeout: it takes -T SEC, -TSEC, --timeout SEC and --timeout=SEC out of the arguments
#   (also inside a cluster such as -qT5) and runs busybox wget under busybox timeout, which bounds
#   the whole transfer rather than each read; 0 means no limit, and running out of time exits 1
#   with busybox's "download timed out". `wget` typed in busybox's sh runs the applet, where -T is
#   ignored and --timeout unknown (exit 1): wrap such commands in `timeout SEC` to bound them.
WGET_OPTS_DEBIAN='^cqSO:o:P:Y:U:T:+t:n::'
WGET_OPTS_FIXED='^cqSO:o:P:Y:U:T:t:n:::'
patch_wget_timeout() { # patch_wget_timeout BUSYBOX
  local bin=$1 help offsets
  help=$("$bin" wget --help 2>&1) || true
  case $help in
  *'-T SEC'*) return 0 ;;
  esac
  offsets=$(LC_ALL=C grep -obUa -F -- "$WGET_OPTS_DEBIAN" "$bin" | cut -d: -f1) || true
  if [ "$(printf '%s\n' "$offsets" | grep -c .)" != 1 ]; then
    echo "build-images: $busybox's wget lacks -T but its option string is not the known one;" \
      "wget -T may crash in tandem.local/busybox" >&2
    return 0
  fi
  printf '%s' "$WGET_OPTS_FIXED" | dd of="$bin" bs=1 seek="$offsets" conv=notrunc status=none
}

wget_wrapper() { # wget_wrapper FILE
  cat >"$1" <<'WRAPPER'
#!/bin/sh
# wget without -T support in Debian's busybox: -T/--timeout SEC become `busybox timeout SEC`.
# See scripts/build-images.sh in tandem for why.
t= want= rest_args=
for a do
  shift
  if [ -n "$want" ]; then
    if [ "$want" = T ]; then t=$a; else set -- "$@" "$a"; fi
    want=
    continue
  fi
  if [ -n "$rest_args" ]; then
    set -- "$@" "$a"
    continue
  fi
  case $a in
  --) rest_args=1 ;;
  --timeout=*) t=${a#--timeout=}; continue ;;
  --timeout) want=T; continue ;;
  --output-document | --output-file | --directory-prefix | --proxy | --user-agent | --tries | \
    --header | --post-data | --post-file) want=keep ;;
  --*) ;;
  -?*)
    rest=${a#-} kept=
    while [ -n "$rest" ]; do
      c=${rest%"${rest#?}"}
      rest=${rest#?}
      case $c in
      T) if [ -n "$rest" ]; then t=$rest; else want=T; fi; rest= ;;
      [OoPYUt]) kept=$kept$c$rest; [ -n "$rest" ] || want=keep; rest= ;;
      n) kept=$kept$c$rest; rest= ;;
      *) kept=$kept$c ;;
      esac
    done
    [ -n "$kept" ] || continue
    a=-$kept
    ;;
  esac
  set -- "$@" "$a"
done
if [ "$want" = T ]; then
  echo "wget: option requires an argument -- 'T'" >&2
  exit 1
fi
case $t in
'' | 0) exec /bin/busybox wget "$@" ;;
*[!0-9]*) echo "wget: invalid number '$t'" >&2; exit 1 ;;
esac
# SIGINT, not TERM: sh reports a child killed by TERM ("Terminated"), which -q must not print.
/bin/busybox timeout -s INT "$t" /bin/busybox wget "$@"
rc=$?
if [ "$rc" = 130 ]; then
  echo "wget: download timed out" >&2
  exit 1
fi
exit "$rc"
WRAPPER
  chmod 0755 "$1"
}

# busybox: every applet as /bin/<applet> (wget as the wrapper above), and a page for httpd to serve.
root="$work/busybox-rootfs"
base_rootfs "$root"
patch_wget_timeout "$root/bin/busybox"
"$busybox" --list | while read -r applet; do
  case $applet in
  busybox) ;;
  wget) wget_wrapper "$root/bin/wget" ;;
  *) ln -s busybox "$root/bin/$applet" ;;
  esac
done
printf '<html><body>tandem busybox</body></html>\n' >"$root/var/www/index.html"
chmod 0644 "$root/var/www/index.html"
build_image busybox tandem.local/busybox:1 "$root" '"Cmd":["/bin/sh"]'
