#!/bin/sh
# Escape probe (shell): use the host's own admin tools from inside the sandbox:
# util-linux unshare/nsenter/mount/setpriv/chroot, sudo, su, ip. Any that works
# is a breach. Exits 0 only on a breach; prints one line.
breach=""
held=""
try() {  # try NAME COMMAND... : a zero exit status is a breach
  name=$1
  shift
  if ! command -v "$1" >/dev/null 2>&1; then
    return
  fi
  if "$@" </dev/null >/dev/null 2>&1; then
    breach="$breach $name"
  else
    held="$held $name"
  fi
}
mkdir -p /tmp/sh-probe-mnt
try unshare-user unshare -U true
try unshare-root unshare -r true
try unshare-mount unshare -m true
try unshare-net unshare -n true
try nsenter-init-mnt nsenter -t 1 -m true
try nsenter-init-net nsenter -t 1 -n true
try mount-tmpfs mount -t tmpfs none /tmp/sh-probe-mnt
try mount-bind-root mount --bind / /tmp/sh-probe-mnt
try chroot chroot / true
try setpriv-root setpriv --reuid=0 --regid=0 --clear-groups true
try sudo sudo -n true
try su su -c true root
try ip-link-add ip link add dbxshprobe type dummy
try ip-addr-add ip addr add 10.99.0.2/32 dev lo
try hostname hostname sh-probe-escaped
try swapon swapon /workspace/no-such-swap
try dmesg dmesg
try nft-flush nft flush ruleset
if [ "$(id -u)" != 1000 ]; then
  breach="$breach uid=$(id -u)"
fi
if [ -n "$breach" ]; then
  echo "sh_host_tools: BREACH: worked:$breach; refused:$held"
  exit 0
fi
echo "sh_host_tools: HELD: refused:$held"
exit 1
