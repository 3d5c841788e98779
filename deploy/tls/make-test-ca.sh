#!/usr/bin/env bash
# A self-signed CA and certificates for a test cluster (not for production: keys are
# unencrypted and the CA lives next to them).
#   deploy/tls/make-test-ca.sh DIR [NAME...]
# Writes DIR/ca.pem, DIR/server.pem + server.key (valid for localhost, 127.0.0.1 and each
# NAME, a host name or an IP), DIR/client.pem + client.key (for mutual TLS), and DIR/token
# (a random cluster token). Then, for daemons and the CLI:
#   export GANTRY_TLS_CA=DIR/ca.pem GANTRY_TLS_CERT=DIR/server.pem GANTRY_TLS_KEY=DIR/server.key
#   export GANTRY_TOKEN_FILE=DIR/token      # and GANTRY_TLS_CLIENT_CA=DIR/ca.pem for mutual TLS
set -euo pipefail
DIR="${1:?usage: make-test-ca.sh DIR [NAME...]}"; shift
mkdir -p "$DIR"; cd "$DIR"
san="DNS:localhost,IP:127.0.0.1"
for n in "$@"; do
  if [[ "$n" =~ ^[0-9.]+$ ]]; then san="$san,IP:$n"; else san="$san,DNS:$n"; fi
done
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=gantry test CA" -keyout ca.key -out ca.pem 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -subj "/CN=gantry $who" -keyout "$who.key" -out "$who.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$san" "$([ $who = server ] && echo serverAuth,clientAuth || echo clientAuth)" >"$who.ext"
  openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile "$who.ext" \
    -out "$who.pem" 2>/dev/null
  rm -f "$who.csr" "$who.ext"
done
openssl rand -hex 24 >token
chmod 600 ./*.key token
echo "test CA in $DIR: ca.pem, server.pem/key ($san), client.pem/key, token"
