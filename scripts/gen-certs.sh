#!/usr/bin/env bash
# Makes the certificates of a local mutual-TLS Ordo cluster with openssl.
#
#   scripts/gen-certs.sh [--force] [--san LIST] [DIR]
#
# DIR defaults to $ORDO_CERT_DIR, else certs/ in the repository. It gets,
# all ECDSA P-256 and PEM, keys mode 0600, signed by one new CA:
#
#   ca.pem      ca-key.pem      the cluster CA, CN=ordo-ca, 10 years
#   node.pem    node-key.pem    CN=ordo-node, serverAuth+clientAuth, 1 year:
#                               one certificate for every node; SANs
#                               127.0.0.1, ::1, 127.0.0.11-15, localhost,
#                               this host's name, and LIST
#   client.pem  client-key.pem  CN=ordo-client, clientAuth only, 1 year
#   admin.pem   admin-key.pem   CN=ordo-admin, clientAuth only, 1 year
#   admin.token                 32 random bytes, hex, mode 0600
#
# Ordo takes any CA-signed certificate with serverAuth for a cluster node,
# so only node.pem carries it. LIST is comma-separated IP:addr or DNS:name
# entries (e.g. IP:10.0.0.5,DNS:node1.example) for the node certificate;
# $ORDO_CERT_SANS adds more. DIR also gets a .gitignore of '*' (keys stay
# out of git). An existing set is never overwritten unless
# --force is given, and --force replaces all of it, CA included (every
# certificate signed by the old CA stops working).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prog=$(basename "$0")

usage() {
  echo "usage: $prog [--force] [--san IP:addr,DNS:name,...] [DIR]"
  echo "  DIR defaults to \$ORDO_CERT_DIR, else $root/certs"
  exit "${1:-2}"
}
die() { echo "$prog: $*" >&2; exit 1; }

force=0
sans_arg=${ORDO_CERT_SANS:-}
dir=
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --san) [ $# -ge 2 ] || usage >&2; sans_arg="$sans_arg,$2"; shift ;;
    --san=*) sans_arg="$sans_arg,${1#--san=}" ;;
    -h|--help) usage 0 ;;
    -*) echo "$prog: unknown flag $1" >&2; usage >&2 ;;
    *) [ -z "$dir" ] || usage >&2; dir=$1 ;;
  esac
  shift
done
dir=${dir:-${ORDO_CERT_DIR:-$root/certs}}

command -v openssl >/dev/null 2>&1 ||
  die "openssl not found; install it (Debian/Ubuntu: apt-get install -y openssl)"

# The node certificate's subject alternative names, each once.
san_ip=()
san_dns=()
lower() { tr '[:upper:]' '[:lower:]' <<<"$1"; }
add_ip() {
  local e
  for e in ${san_ip[@]+"${san_ip[@]}"}; do [ "$e" != "$1" ] || return 0; done
  san_ip+=("$1")
}
add_dns() {
  local e
  for e in ${san_dns[@]+"${san_dns[@]}"}; do [ "$(lower "$e")" != "$(lower "$1")" ] || return 0; done
  san_dns+=("$1")
}
for ip in 127.0.0.1 ::1 127.0.0.11 127.0.0.12 127.0.0.13 127.0.0.14 127.0.0.15; do add_ip $ip; done
add_dns localhost
host=$(hostname 2>/dev/null || uname -n 2>/dev/null || true)
if [[ $host =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
  add_dns "$host"
elif [ -n "$host" ]; then
  echo "$prog: warning: host name '$host' is not a DNS name; left out of node.pem" >&2
fi
IFS=, read -r -a extra <<<"$sans_arg"
for s in ${extra[@]+"${extra[@]}"}; do
  s=${s//[[:space:]]/}
  [ -n "$s" ] || continue
  kind=$(tr '[:lower:]' '[:upper:]' <<<"${s%%:*}")
  value=${s#*:}
  if [ "$s" = "$value" ] || [ -z "$value" ]; then kind=bad; fi
  case "$kind" in
    IP)
      [[ $value =~ ^[0-9A-Fa-f:.]+$ ]] || die "--san $s: '$value' is not an IP address"
      add_ip "$value" ;;
    DNS)
      [[ $value =~ ^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]] ||
        die "--san $s: '$value' is not a DNS name"
      add_dns "$value" ;;
    *) die "--san $s: want IP:address or DNS:name" ;;
  esac
done

files=(ca.pem ca-key.pem node.pem node-key.pem client.pem client-key.pem
  admin.pem admin-key.pem admin.token)
if [ $force = 0 ]; then
  existing=()
  for f in "${files[@]}"; do [ -e "$dir/$f" ] && existing+=("$f"); done
  if [ ${#existing[@]} -gt 0 ]; then
    die "$dir already holds ${existing[*]}; refusing to overwrite (--force makes a new CA and replaces them all)"
  fi
fi

umask 077
mkdir -p "$dir"
[ -w "$dir" ] || die "cannot write to $dir"
# Private keys: keep them out of git even when DIR is in a work tree.
[ -e "$dir/.gitignore" ] || echo '*' >"$dir/.gitignore"
# Everything is made in a scratch directory next to the result and moved
# into place only once it all verifies, so a failure leaves DIR as it was.
work=$(mktemp -d "$dir/.gen-certs.XXXXXX")
trap 'rm -rf "$work"' EXIT

ssl() {
  local out
  if ! out=$(openssl "$@" 2>&1); then
    echo "$prog: openssl $1 failed:" >&2
    echo "$out" >&2
    exit 1
  fi
}

# conf NAME EXTENSIONS...: an openssl config for one certificate, with a
# [req] section (so no system openssl.cnf is needed) and an [ext] section.
conf() {
  local name=$1; shift
  {
    echo "[req]"
    echo "distinguished_name = dn"
    echo "prompt = no"
    echo "[dn]"
    echo "CN = ordo"
    echo "[ext]"
    printf '%s\n' "$@"
  } >"$work/$name.cnf"
}

key() { ssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -pkeyopt ec_param_enc:named_curve -out "$work/$1-key.pem"; }

# leaf NAME CN DAYS: a certificate signed by the CA, extensions from NAME.cnf.
leaf() {
  key "$1"
  ssl req -new -config "$work/$1.cnf" -key "$work/$1-key.pem" -subj "/CN=$2" -out "$work/$1.csr"
  ssl x509 -req -in "$work/$1.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$3" -sha256 \
    -extfile "$work/$1.cnf" -extensions ext -out "$work/$1.pem"
}

conf ca "basicConstraints = critical, CA:TRUE, pathlen:0" \
  "keyUsage = critical, keyCertSign, cRLSign" \
  "subjectKeyIdentifier = hash"
key ca
ssl req -x509 -new -config "$work/ca.cnf" -extensions ext -key "$work/ca-key.pem" \
  -subj /CN=ordo-ca -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 -out "$work/ca.pem"

leaf_ext=("basicConstraints = critical, CA:FALSE"
  "keyUsage = critical, digitalSignature"
  "subjectKeyIdentifier = hash"
  "authorityKeyIdentifier = keyid")
alt=("subjectAltName = @alt" "[alt]")
for i in "${!san_ip[@]}"; do alt+=("IP.$((i + 1)) = ${san_ip[$i]}"); done
for i in "${!san_dns[@]}"; do alt+=("DNS.$((i + 1)) = ${san_dns[$i]}"); done
conf node "${leaf_ext[@]}" "extendedKeyUsage = serverAuth, clientAuth" "${alt[@]}"
leaf node ordo-node 365
conf client "${leaf_ext[@]}" "extendedKeyUsage = clientAuth"
leaf client ordo-client 365
conf admin "${leaf_ext[@]}" "extendedKeyUsage = clientAuth"
leaf admin ordo-admin 365
openssl rand -hex 32 | tr -d '\n' >"$work/admin.token"

# Check what was made before it replaces anything: every certificate
# chains to the CA and is good for clients; only the node's is good for
# servers (Ordo would take any other for a node).
for c in node client admin; do
  ssl verify -CAfile "$work/ca.pem" -purpose sslclient "$work/$c.pem"
done
ssl verify -CAfile "$work/ca.pem" -purpose sslserver "$work/node.pem"
for c in client admin; do
  if openssl verify -CAfile "$work/ca.pem" -purpose sslserver "$work/$c.pem" >/dev/null 2>&1; then
    die "$c.pem would pass as a server (node) certificate; not installing"
  fi
done
subject() { openssl x509 -noout -subject -nameopt RFC2253 -in "$1" | sed 's/^subject= *//'; }
[ "$(subject "$work/admin.pem")" = "CN=ordo-admin" ] ||
  die "admin.pem's subject is '$(subject "$work/admin.pem")', not CN=ordo-admin"

chmod 600 "$work"/*-key.pem "$work/admin.token"
chmod 644 "$work"/ca.pem "$work"/node.pem "$work"/client.pem "$work"/admin.pem
for f in "${files[@]}"; do mv -f "$work/$f" "$dir/$f"; done

# ext CERT TITLE: the value of one extension in openssl's text form (the
# line after its title).
ext() {
  openssl x509 -noout -text -in "$1" |
    awk -v t="$2:" 'on { sub(/^ +/, ""); print; exit } index($0, t) { on = 1 }'
}
echo "Made in $dir:"
for c in ca node client admin; do
  f=$dir/$c.pem
  echo "  $c.pem  $c-key.pem"
  echo "      subject: $(subject "$f")"
  echo "      expires: $(openssl x509 -noout -enddate -in "$f" | sed 's/^notAfter=//')"
  u=$(ext "$f" "X509v3 Extended Key Usage")
  [ -z "$u" ] || echo "      usage:   $u"
  s=$(ext "$f" "X509v3 Subject Alternative Name")
  [ -z "$s" ] || echo "      SANs:    $s"
done
echo "  admin.token (64 hex digits)"
echo "Verified against ca.pem:"
openssl verify -CAfile "$dir/ca.pem" "$dir/node.pem" "$dir/client.pem" "$dir/admin.pem" | sed 's/^/  /'
