#!/usr/bin/env bash
# Trims the runtime image's Debian root filesystem to what runs in it: an mmdebstrap
# customize hook (scripts/image.sh), run on the host with the root as $1. Kept: the programs
# the image runs (bubblewrap, socat; `id` for scripts/container-test.sh; nologin, the user's
# shell entry), the shared libraries they and palisade load (found with the root's own
# ld.so --list, so a library added by a Debian update is kept when it is needed), /etc, CA
# certificates, the copyright files and the package database (status, file lists) for
# scanners. Removed: every other program (coreutils, util-linux, e2fsprogs, dpkg, the
# login/passwd tools), the libraries only they load, PAM modules, locales, terminfo,
# completions, keyrings, lintian overrides and the packages' maintainer scripts.
# Never run it on a live system: it deletes without asking.
set -euo pipefail
root=${1:?usage: trim-rootfs.sh ROOTFS}
[ -x "$root/usr/bin/bwrap" ] && [ -f "$root/var/lib/dpkg/status" ] || {
  echo "trim-rootfs: $root does not look like the image's root filesystem" >&2
  exit 1
}
lib=usr/lib/x86_64-linux-gnu
programs=(usr/bin/bwrap usr/bin/socat usr/bin/id)
# What the palisade release binary links (ldd): it is copied in later by the Containerfile.
declare -A keep=([ld-linux-x86-64.so.2]=1 [libc.so.6]=1 [libm.so.6]=1 [libgcc_s.so.1]=1)
for p in "${programs[@]}"; do
  while read -r so; do keep[$so]=1; done < <(
    chroot "$root" /$lib/ld-linux-x86-64.so.2 --list "/$p" | awk '$2 == "=>" {print $1}')
done
# A kept soname is usually a link to the versioned file: keep that file too.
for so in "${!keep[@]}"; do
  t=$(readlink "$root/$lib/$so" || true)
  [ -n "$t" ] && keep[${t##*/}]=1
done
for f in "$root/$lib"/*.so*; do
  n=${f##*/}
  case $n in libnss_*) continue ;; esac
  [ -n "${keep[$n]:-}" ] || rm -f "$f"
done
rm -rf "$root/$lib/security" "$root/$lib/e2fsprogs" "$root/usr/lib/locale" "$root/usr/lib/terminfo" \
  "$root/usr/libexec"
for f in "$root"/usr/bin/* "$root"/usr/sbin/*; do
  case ${f#"$root"/} in usr/bin/bwrap | usr/bin/socat | usr/bin/id | usr/sbin/nologin) ;;
    *) rm -f "$f" ;; esac
done
for d in bash-completion bug dict doc-base gcc gdb info keyrings libgcrypt20 lintian locale man \
  menu pam pam-configs pixmaps polkit-1 tabset terminfo util-linux zsh debconf; do
  rm -rf "${root:?}/usr/share/$d"
done
rm -f "$root"/var/lib/dpkg/info/*.{preinst,postinst,prerm,postrm,config,templates,triggers,shlibs}
# Every kept program still finds its libraries.
for p in "${programs[@]}"; do
  if chroot "$root" /$lib/ld-linux-x86-64.so.2 --list "/$p" | grep -q 'not found'; then
    echo "trim-rootfs: /$p lost a library" >&2
    exit 1
  fi
done
# The TLS client of an https:// JWKS URL trusts the system store (rustls-native-certs reads
# /etc/ssl/certs, from the ca-certificates package): a root without it could never fetch keys.
# Nothing above removes /etc or /usr/share/ca-certificates; this says so if that changes.
bundle=$root/etc/ssl/certs/ca-certificates.crt
if ! [ -s "$bundle" ] || ! grep -q -- '-----BEGIN CERTIFICATE-----' "$bundle"; then
  echo "trim-rootfs: /etc/ssl/certs/ca-certificates.crt is missing or holds no certificate" >&2
  exit 1
fi
# Each link of /etc/ssl/certs (to /usr/share/ca-certificates, hash links) resolves in the root.
for l in "$root"/etc/ssl/certs/*; do
  t=$l
  for _ in 1 2 3 4 5 6 7 8; do
    [ -L "$t" ] || break
    r=$(readlink "$t")
    case $r in /*) t=$root$r ;; *) t=${t%/*}/$r ;; esac
  done
  if ! [ -f "$t" ]; then
    echo "trim-rootfs: ${l#"$root"} does not lead to a certificate in the root" >&2
    exit 1
  fi
done
