# shellcheck shell=bash
# Private throwaway etcd with TLS and authentication for the test command (sourced by
# scripts/with-servers).
#
# start_etcd_tls: unless ONCE_TEST_ETCD_TLS is set, make a CA, a server certificate for 127.0.0.1 and a
# client certificate with openssl under $ONCE_TEST_TMP/etcd-tls, start a one-member etcd serving clients
# over TLS only (--client-cert-auth: a client needs a certificate the CA signed; made without a
# CommonName, which the JSON gateway the store once spoke refused), and turn on etcd's
# authentication with etcdctl: user root, and user "once" whose role "once" may read and write keys
# under /once/ only. Simple auth tokens expire after 3 s idle (--auth-token-ttl), so the tests renew
# tokens often. Passwords are hashed with bcrypt cost 4 (--bcrypt-cost; etcd's default 10 costs ~70 ms
# of server CPU per authentication, and the suite's parallel opens on a loaded 2-core CI machine queued
# past the 2.5 s connect bound). Exports
#   ONCE_TEST_ETCD_TLS  etcds://once:PASSWORD@127.0.0.1:PORT?ca=…&cert=…&key=…
#   ONCE_TEST_ETCD_TLS_ROOT  the same DSN for root (tests use it to check permissions)
# It registers stop_etcd_tls in the `stops` array.

start_etcd_tls() {
  if [ -n "${ONCE_TEST_ETCD_TLS:-}" ]; then return 0; fi
  local dir port peer t0 bin i ctl q
  t0=$SECONDS
  need_pkg etcd etcd-server || return 1
  need_pkg etcdctl etcd-client || return 1
  need_pkg openssl openssl || return 1
  bin=$(command -v etcd)
  dir=$ONCE_TEST_TMP/etcd-tls
  mkdir -p "$dir"
  port=$(free_port)
  peer=$(free_port)
  while [ "$peer" = "$port" ]; do peer=$(free_port); done
  (
    cd "$dir" || exit 1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=once test CA" \
      -keyout ca.key -out ca.pem &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr &&
      printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext &&
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.pem &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=once" -keyout client.key -out client.csr &&
      printf 'extendedKeyUsage=clientAuth\n' >client.ext &&
      openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext -out client.pem
  ) >"$dir/openssl.log" 2>&1 || { log "etcd-tls: openssl failed:"; tail -n 20 "$dir/openssl.log" >&2; return 1; }
  chmod 644 "$dir"/*.pem "$dir"/*.key
  setsid "$bin" --name default --data-dir "$dir/data" \
    --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://127.0.0.1:$port" \
    --cert-file "$dir/server.pem" --key-file "$dir/server.key" --trusted-ca-file "$dir/ca.pem" --client-cert-auth \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "default=http://127.0.0.1:$peer" --initial-cluster-state new --auth-token simple --auth-token-ttl 3 --bcrypt-cost 4 \
    </dev/null >>"$dir/server.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  stops+=(stop_etcd_tls)
  ctl=(etcdctl --endpoints "https://127.0.0.1:$port" --cacert "$dir/ca.pem" --cert "$dir/client.pem" --key "$dir/client.key")
  for ((i = 0; i < 300; i++)); do
    ETCDCTL_API=3 "${ctl[@]}" endpoint health >/dev/null 2>&1 && break
    kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null || { log "etcd-tls: etcd exited:"; tail -n 20 "$dir/server.log" >&2; return 1; }
    sleep 0.1
  done
  {
    ETCDCTL_API=3 "${ctl[@]}" user add root --new-user-password=rootpw &&
      ETCDCTL_API=3 "${ctl[@]}" user grant-role root root &&
      ETCDCTL_API=3 "${ctl[@]}" role add once &&
      ETCDCTL_API=3 "${ctl[@]}" role grant-permission once --prefix=true readwrite /once/ &&
      ETCDCTL_API=3 "${ctl[@]}" user add once --new-user-password=once-pw &&
      ETCDCTL_API=3 "${ctl[@]}" user grant-role once once &&
      ETCDCTL_API=3 "${ctl[@]}" auth enable
  } >"$dir/auth.log" 2>&1 || { log "etcd-tls: enabling auth failed:"; tail -n 20 "$dir/auth.log" >&2; return 1; }
  q="ca=$dir/ca.pem&cert=$dir/client.pem&key=$dir/client.key"
  q=${q//\//%2F}
  export ONCE_TEST_ETCD_TLS="etcds://once:once-pw@127.0.0.1:$port?$q"
  export ONCE_TEST_ETCD_TLS_ROOT="etcds://root:rootpw@127.0.0.1:$port?$q"
  log "etcd-tls: private server with TLS and auth on 127.0.0.1:$port ($((SECONDS - t0))s)"
}

stop_etcd_tls() {
  local pid
  pid=$(cat "$ONCE_TEST_TMP/etcd-tls/etcd.pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || true
}
