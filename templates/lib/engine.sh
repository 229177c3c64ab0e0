# The container engine that builds Dockerfile templates: docker or podman
# where one actually works, else buildah (vfs storage, chroot isolation,
# which needs no daemon, no overlay and no user namespaces).
# Also creates the Debian base image agent-sandbox-base:latest.
# shellcheck shell=bash

ENGINE=""

# Our buildah, on its private storage.
bah() {
	buildah --root "$TEMPLATE_STORAGE_DIR/storage" --runroot "$TEMPLATE_RUN_DIR" \
		--storage-driver vfs "$@"
}

# engine_select: sets ENGINE from TEMPLATE_ENGINE (docker, podman, buildah)
# or from what works on this machine.
engine_select() {
	local want=${TEMPLATE_ENGINE:-auto}
	case $want in
	docker | podman)
		command -v "$want" >/dev/null 2>&1 || die "TEMPLATE_ENGINE=$want but $want is not installed"
		timeout 30 "$want" info >/dev/null 2>&1 || die "TEMPLATE_ENGINE=$want but '$want info' fails"
		ENGINE=$want
		;;
	buildah)
		need_cmd buildah buildah
		ENGINE=buildah
		;;
	auto)
		if command -v docker >/dev/null 2>&1 && timeout 30 docker info >/dev/null 2>&1; then
			ENGINE=docker
		elif command -v podman >/dev/null 2>&1 && timeout 30 podman info >/dev/null 2>&1; then
			ENGINE=podman
		elif command -v buildah >/dev/null 2>&1; then
			ENGINE=buildah
		else
			die "no container engine: install buildah (apt-get install buildah), or run docker or podman"
		fi
		;;
	*) die "TEMPLATE_ENGINE must be docker, podman or buildah (got '$want')" ;;
	esac
}

engine_image_exists() {
	case $ENGINE in
	buildah) bah inspect --type image "$1" >/dev/null 2>&1 ;;
	*) "$ENGINE" image inspect "$1" >/dev/null 2>&1 ;;
	esac
}

# engine_import TAR IMAGE: a single-layer image of a root filesystem tarball.
engine_import() {
	local tar=$1 image=$2 ctr mnt
	local path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	case $ENGINE in
	buildah)
		ctr=$(bah from --name agent-sandbox-import scratch)
		defer bah rm "$ctr"
		mnt=$(bah mount "$ctr")
		defer bah umount "$ctr"
		tar -C "$mnt" --numeric-owner -xpf "$tar"
		bah umount "$ctr" >/dev/null
		bah config --env "$path" --cmd /bin/bash "$ctr"
		bah commit -q --rm "$ctr" "$image" >/dev/null
		;;
	*)
		"$ENGINE" import --change "ENV $path" --change 'CMD ["/bin/bash"]' "$tar" "$image" >/dev/null
		;;
	esac
}

# Names of existing buildah containers, to tell ours apart afterwards.
engine_containers() {
	bah containers -q --all 2>/dev/null | sort
}

# Removes buildah containers that did not exist before ($1: the earlier
# list). A build holds the storage lock, so new ones are its own.
engine_remove_new_containers() {
	local before=$1 ctr
	while IFS= read -r ctr; do
		if [[ -n $ctr ]]; then bah rm "$ctr" >/dev/null 2>&1 || true; fi
	done < <(comm -13 <(printf '%s\n' "$before") <(engine_containers))
}

# engine_build DOCKERFILE CONTEXT TAG LOG: builds the image, writing the
# engine's output to LOG and one line per Dockerfile step to stderr.
engine_build() {
	local dockerfile=$1 context=$2 tag=$3 logfile=$4 status
	local -a cmd
	case $ENGINE in
	buildah)
		cmd=(bah bud --isolation chroot --layers=false --pull=false --format oci
			-f "$dockerfile" -t "$tag" "$context")
		;;
	*) cmd=("$ENGINE" build --rm --force-rm -f "$dockerfile" -t "$tag" "$context") ;;
	esac
	set +e
	"${cmd[@]}" </dev/null 2>&1 | tee "$logfile" |
		awk -v p="[$log_prefix]   " '
			/^(\[[0-9]+\/[0-9]+\] )?STEP [0-9]+\/[0-9]+: |^Step [0-9]+\/[0-9]+ : |^#[0-9]+ \[/ {
				print p substr($0, 1, 120); fflush()
			}' >&2
	status=${PIPESTATUS[0]}
	set -e
	return "$status"
}

# engine_inspect TAG FIELD: the image config's Labels (object), Env (array) or
# WorkingDir (string) as JSON.
engine_inspect() {
	local tag=$1 field=$2 empty='{}'
	[[ $field == Env ]] && empty='[]'
	[[ $field == WorkingDir ]] && empty='""'
	case $ENGINE in
	buildah) bah inspect --type image "$tag" | jq -c ".OCIv1.config.$field // $empty" ;;
	*) "$ENGINE" image inspect "$tag" | jq -c ".[0].Config.$field // $empty" ;;
	esac
}

# engine_export TAG DIR: the image's filesystem, unpacked into DIR.
engine_export() {
	local tag=$1 dir=$2 ctr mnt
	case $ENGINE in
	buildah)
		ctr=$(bah from --pull-never --name "agent-sandbox-export-$log_prefix" "$tag")
		defer bah rm "$ctr"
		mnt=$(bah mount "$ctr")
		defer bah umount "$ctr"
		cp -a "$mnt/." "$dir/"
		bah umount "$ctr" >/dev/null
		bah rm "$ctr" >/dev/null
		;;
	*)
		ctr=$("$ENGINE" create "$tag" /bin/true)
		defer "$ENGINE" rm -f "$ctr"
		"$ENGINE" export "$ctr" | tar -C "$dir" --numeric-owner -xpf -
		"$ENGINE" rm -f "$ctr" >/dev/null
		;;
	esac
}

engine_remove_image() {
	case $ENGINE in
	buildah) bah rmi "$1" >/dev/null 2>&1 || true ;;
	*) "$ENGINE" rmi "$1" >/dev/null 2>&1 || true ;;
	esac
}

# The apt sources for the base image: TEMPLATE_APT_SOURCES if set, else the
# host's own when the host is Debian 12 (same mirrors, proxies and pins the
# machine is set up for), else mmdebstrap's defaults.
base_image_sources() {
	local codename=""
	if [[ -n ${TEMPLATE_APT_SOURCES:-} ]]; then
		[[ -r $TEMPLATE_APT_SOURCES ]] || die "TEMPLATE_APT_SOURCES=$TEMPLATE_APT_SOURCES is not readable"
		printf '%s\n' "$TEMPLATE_APT_SOURCES"
		return
	fi
	# shellcheck disable=SC1091 # the host's file
	[[ -r /etc/os-release ]] && codename=$(. /etc/os-release && echo "${ID:-}-${VERSION_CODENAME:-}")
	[[ $codename == debian-bookworm ]] || return 0
	if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
		printf '%s\n' /etc/apt/sources.list.d/debian.sources
	elif [[ -s /etc/apt/sources.list ]]; then
		printf '%s\n' /etc/apt/sources.list
	fi
}

# base_image_ensure WORKDIR FORCE: creates agent-sandbox-base:latest unless it
# exists (or FORCE is 1): Debian 12 minbase with ca-certificates, without
# documentation, manual pages and translations (also for packages that
# templates install later).
base_image_ensure() {
	local work=$1 force=$2 tar start
	local -a sources=()
	if [[ $force != 1 ]] && engine_image_exists "$BASE_IMAGE"; then
		log "base image $BASE_IMAGE: present"
		return 0
	fi
	need_cmd mmdebstrap mmdebstrap
	start=$(date +%s)
	mapfile -t sources < <(base_image_sources)
	log "creating base image $BASE_IMAGE: Debian 12 by mmdebstrap${sources:+ from ${sources[*]}}"
	tar="$work/base.tar"
	if ! mmdebstrap --variant=minbase --include=ca-certificates --format=tar \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		bookworm "$tar" "${sources[@]}" </dev/null >"$work/mmdebstrap.log" 2>&1; then
		tail -n 30 "$work/mmdebstrap.log" | sed 's/^/    | /' >&2
		die "mmdebstrap failed"
	fi
	log "importing the base image into $ENGINE"
	engine_import "$tar" "$BASE_IMAGE"
	rm -f "$tar"
	log "base image $BASE_IMAGE created in $(($(date +%s) - start)) s"
}
