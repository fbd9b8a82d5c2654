#!/bin/sh
# gen-certs.sh OUTDIR [IP1 IP2 IP3]: a private CA and the certificates the
# example cluster (deploy/example-cluster) uses, with openssl:
#   ca.pem, ca-key.pem                 the CA (keep ca-key.pem offline)
#   vmN.pem, vmN-key.pem               etcd and NATS server+peer certs (SAN: the VM's IP)
#   botctl-client.pem, -key.pem        botctl's client certificate (CN botctl)
#   ops-client.pem, -key.pem           an operator's, for etcdctl and the nats CLI (CN ops)
# Idempotent: existing files are kept. Certificates last 825 days.
set -eu
out=${1:?usage: gen-certs.sh OUTDIR [IP1 IP2 IP3]}
shift
[ $# -gt 0 ] || set -- 10.0.0.11 10.0.0.12 10.0.0.13
mkdir -p "$out"
umask 077
cd "$out"
if [ ! -f ca.pem ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=botctl example cluster CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
fi
sign() { # name subject extensions
	[ -f "$1.pem" ] && return 0
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" \
		-keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
	printf '%s\n' "$3" > "$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 825 \
		-extfile "$1.ext" -out "$1.pem" 2>/dev/null
	rm -f "$1.csr" "$1.ext"
}
n=1
for ip in "$@"; do
	sign "vm$n" "/CN=vm$n" "subjectAltName=IP:$ip,IP:127.0.0.1,DNS:vm$n,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
	n=$((n + 1))
done
sign botctl-client "/CN=botctl" "extendedKeyUsage=clientAuth"
sign ops-client "/CN=ops" "extendedKeyUsage=clientAuth"
echo "certificates in $out"
