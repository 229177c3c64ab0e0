#!/usr/bin/env bash
# Builds sandbox templates: templates/build.sh [--rebuild-base] NAME...
#
# A template is a directory templates/<name>/ holding a template.json
# manifest and either a Dockerfile (built by docker, podman or buildah) or an
# executable build-rootfs.sh recipe (run directly, no container engine; this
# is how `base` builds offline in seconds).
#
# Output, replaced as a whole only once everything succeeded:
#   $ARTIFACTS/templates/<name>/template.json   manifest
#   $ARTIFACTS/templates/<name>/rootfs/         root filesystem (jail driver)
#   $ARTIFACTS/templates/<name>/rootfs.ext4     same, as an ext4 image (VM drivers)
# with ARTIFACTS=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}.
# Every rootfs gets the guest agent as /sbin/sandbox-agent.
#
# Progress goes to stderr, one line per step; the template's directory is
# printed on stdout. See docs/templates.md for the environment variables.
set -euo pipefail

# shellcheck source=templates/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=templates/lib/dockerfile.sh
. "$TEMPLATES_HOME/lib/dockerfile.sh"
# shellcheck source=templates/lib/manifest.sh
. "$TEMPLATES_HOME/lib/manifest.sh"
# shellcheck source=templates/lib/rootfs.sh
. "$TEMPLATES_HOME/lib/rootfs.sh"
# shellcheck source=templates/lib/engine.sh
. "$TEMPLATES_HOME/lib/engine.sh"

usage() {
	cat <<EOF
usage: templates/build.sh [--force] [--rebuild-base] NAME...

Builds each named template from $TEMPLATES_DIR/NAME/ into
$ARTIFACTS/templates/NAME/, unless the build there was made from the same
inputs (the template's files, this builder, the guest agent): then it is kept.

  --force          build even when the inputs are unchanged
  --rebuild-base   recreate the Debian base image $BASE_IMAGE first
                   (it is otherwise created once and reused)

Templates here: $(list_templates)
EOF
}

list_templates() {
	local d names=()
	for d in "$TEMPLATES_DIR"/*/; do
		[[ -f $d/template.json || -f $d/Dockerfile ]] && names+=("$(basename "$d")")
	done
	printf '%s' "${names[*]:-none}"
}

# build_with_engine SRC WORK: the rootfs of a Dockerfile template into
# WORK/rootfs; sets labels_json, env_json, base_image.
build_with_engine() {
	local src=$1 work=$2 tag before
	dockerfile_check "$src/Dockerfile"
	engine_select
	log "engine: $ENGINE"
	take_lock "$TEMPLATE_STORAGE_DIR/build.lock"
	if ((df_uses_base)); then
		base_image_ensure "$work" "$rebuild_base"
		rebuild_base=0
	fi

	tag="agent-sandbox-template-$name:latest"
	if [[ $ENGINE == buildah ]]; then
		before=$(engine_containers)
		defer engine_remove_new_containers "$before"
	fi
	defer engine_remove_image "$tag"
	log "building the Dockerfile"
	if ! engine_build "$src/Dockerfile" "$src" "$tag" "$work/build.log"; then
		dockerfile_report_failure "$work/build.log" "$src/Dockerfile"
		die "the Dockerfile of template $name failed to build"
	fi

	labels_json=$(engine_inspect "$tag" Labels)
	env_json=$(engine_inspect "$tag" Env)
	workdir_warn "$(engine_inspect "$tag" WorkingDir | jq -r 'strings')"
	manifest_check_labels "$labels_json" "$name"
	base_image=$df_final_image

	log "exporting the image's filesystem"
	engine_export "$tag" "$work/rootfs"
	engine_remove_image "$tag"
}

# workdir_warn DIR: a Dockerfile's WORKDIR is not where sessions start (the
# workspace, /home/user, is): say so, rather than let it be ignored in silence.
workdir_warn() {
	case ${1%/} in
	'' | /workspace | /home/user) ;;
	*)
		log "warning: the Dockerfile's WORKDIR $1 is not where commands start: sessions" \
			"start in /home/user, the workspace (its files are there too: docs/templates.md);" \
			"$1 stays in the image, reached by its path"
		;;
	esac
}

# build_with_recipe SRC WORK: runs SRC/build-rootfs.sh WORK/rootfs.
build_with_recipe() {
	local src=$1 work=$2
	log "running build-rootfs.sh (no container engine)"
	if ! "$src/build-rootfs.sh" "$work/rootfs" >"$work/recipe.log" 2>&1 </dev/null; then
		tail -n 30 "$work/recipe.log" | sed 's/^/    | /' >&2
		die "build-rootfs.sh of template $name failed"
	fi
	labels_json='{}'
	env_json='["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'
	base_image=scratch
}

# The SHA-256 of what a build of the template in $1 is made from: its files, the builder and
# the guest agent. Kept in the build as .inputs; a build with the same key is reused.
# Names are relative, so that checkouts in other places make the same key.
inputs_key() {
	local src=$1
	{
		(cd "$src" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
		(cd "$TEMPLATES_HOME" && find build.sh lib -type f -print0 | sort -z |
			xargs -0 sha256sum)
		sha256sum <"$SANDBOX_AGENT_BIN"
	} | sha256sum | cut -d' ' -f1
}

build_one() {
	local src work dest old start headroom used key
	name=$1
	log_prefix=$name
	start=$(date +%s)
	valid_template_name "$name" ||
		die "invalid template name '$name' (lower-case letters, digits, '.', '_', '-'; at most 63)"
	src="$TEMPLATES_DIR/$name"
	[[ -d $src ]] || die "no template '$name' in $TEMPLATES_DIR (templates: $(list_templates))"

	log "checking the template sources in $src"
	[[ -f $src/template.json ]] && manifest_check "$src/template.json" "$name"
	if [[ -f $src/build-rootfs.sh ]]; then
		[[ -x $src/build-rootfs.sh ]] || die "$src/build-rootfs.sh is not executable"
		headroom=${TEMPLATE_HEADROOM_MIB:-32}
	elif [[ -f $src/Dockerfile ]]; then
		headroom=${TEMPLATE_HEADROOM_MIB:-256}
	else
		die "$src has neither a Dockerfile nor a build-rootfs.sh"
	fi

	mkdir -p "$ARTIFACTS/templates"
	take_lock "$ARTIFACTS/templates/.$name.lock"
	dest="$ARTIFACTS/templates/$name"
	key=$(inputs_key "$src")
	if ((!force)) && [[ -f $dest/.inputs && $(<"$dest/.inputs") == "$key" ]]; then
		log "up to date (its inputs are unchanged; --force builds it again): $dest"
		printf '%s\n' "$dest"
		return
	fi
	work=$(mktemp -d "$ARTIFACTS/templates/.$name.build.XXXXXX")
	defer rm -rf "$work"
	chmod 0755 "$work"
	mkdir -m 0755 "$work/rootfs"

	if [[ -f $src/build-rootfs.sh ]]; then
		build_with_recipe "$src" "$work"
	else
		build_with_engine "$src" "$work"
	fi

	log "installing sandbox-agent and the mount points"
	rootfs_finalize "$work/rootfs" "$SANDBOX_AGENT_BIN" "$env_json"
	rm -f "$work/build.log" "$work/recipe.log" "$work/mmdebstrap.log"

	log "writing rootfs.ext4"
	rootfs_make_ext4 "$work/rootfs" "$work/rootfs.ext4" "$headroom"
	manifest_write "$src/template.json" "$labels_json" "$base_image" "$work/template.json" "$name"
	printf '%s\n' "$key" >"$work/.inputs"

	if [[ -e $dest ]]; then
		old=$(mktemp -d "$ARTIFACTS/templates/.$name.old.XXXXXX")
		defer rm -rf "$old"
		mv "$dest" "$old/"
	fi
	mv "$work" "$dest"
	[[ -n ${old:-} ]] && rm -rf "$old"

	used=$(du -sm "$dest/rootfs" | cut -f1)
	log "done in $(($(date +%s) - start)) s: $dest (rootfs ${used} MiB, rootfs.ext4 $(($(stat -c %s "$dest/rootfs.ext4") / 1048576)) MiB)"
	printf '%s\n' "$dest"
}

main() {
	local names=() n
	rebuild_base=0
	force=0
	while (($#)); do
		case $1 in
		-h | --help)
			usage
			exit 0
			;;
		--force) force=1 ;;
		--rebuild-base) rebuild_base=1 ;;
		--) shift; names+=("$@"); break ;;
		-*)
			usage >&2
			exit 2
			;;
		*) names+=("$1") ;;
		esac
		shift
	done
	((${#names[@]})) || {
		usage >&2
		exit 2
	}

	need_cmd jq jq
	need_cmd mkfs.ext4 e2fsprogs
	need_cmd flock util-linux
	is_static "$SANDBOX_AGENT_BIN" ||
		die "the guest agent $SANDBOX_AGENT_BIN is missing or not a static executable (build it, or set SANDBOX_AGENT_BIN)"

	install_cleanup_trap
	for n in "${names[@]}"; do
		build_one "$n"
		run_cleanup
	done
}

main "$@"
