#!/bin/sh
# Escape probe (shell): search every directory the sandbox can see (except /usr,
# /proc and its own /workspace) for a token that exists only in files of the
# host (ARGS: TOKEN). Finding it anywhere is a breach. Exits 0 only on a breach.
token=$1
if [ -z "$token" ]; then
  echo "sh_token_search: ERROR: usage: sh_token_search.sh TOKEN"
  exit 2
fi
dirs=""
for d in /etc /tmp /dev /.deepbox /run /var /home /root /opt /srv /mnt /media /boot /sys \
  /lib /lib64 /bin /sbin; do
  [ -e "$d" ] && dirs="$dirs $d"
done
found=$(grep -rsl -D skip --no-messages -F -- "$token" $dirs 2>/dev/null | head -5)
top=$(ls -A / | tr '\n' ' ')
if [ -n "$found" ]; then
  echo "sh_token_search: BREACH: host token found in: $found"
  exit 0
fi
echo "sh_token_search: HELD: token in none of:$dirs (/ holds: $top)"
exit 1
