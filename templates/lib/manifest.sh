# template.json: validation of a template's source manifest and writing of
# the built one.
# shellcheck shell=bash

# Lists, one per line, what is wrong with a manifest object (nothing if fine).
# shellcheck disable=SC2016 # a jq program, not shell
MANIFEST_CHECK_JQ='
def str($k): if has($k) and (.[$k] | type) != "string" then ["\($k) must be a string"] else [] end;
def int_in($k; $lo; $hi):
  if has($k) and ((.[$k] | type) != "number" or .[$k] != (.[$k] | floor) or .[$k] < $lo or .[$k] > $hi)
  then ["resources.\($k) must be an integer from \($lo) to \($hi)"] else [] end;
if type != "object" then ["the top level must be a JSON object"]
else
  str("name") + str("displayName") + str("version") + str("description")
  + str("baseImage") + str("createdAt")
  + (if has("tools") and ((.tools | type) != "array" or any(.tools[]; type != "string"))
     then ["tools must be an array of strings"] else [] end)
  + (if has("resources") then
       if (.resources | type) != "object" then ["resources must be an object"]
       else .resources | int_in("memSizeMib"; 32; 1048576) + int_in("vcpuCount"; 1; 32) end
     else [] end)
  + (if has("name") and (.name | type) == "string" and .name != $name
     then ["name is \"\(.name)\" but the template directory is \"\($name)\""] else [] end)
end | .[]
'

# manifest_check FILE NAME: fails with every problem of the source manifest.
manifest_check() {
	local file=$1 name=$2 problems count line
	if ! count=$(jq -s length "$file" 2>&1); then
		die "$file is not valid JSON: ${count#jq: error (at *): }"
	fi
	[[ $count == 1 ]] || die "$file must hold exactly one JSON object (found $count values)"
	problems=$(jq -r --arg name "$name" "$MANIFEST_CHECK_JQ" "$file") ||
		die "$file could not be checked"
	if [[ -n $problems ]]; then
		while IFS= read -r line; do
			printf '[%s] error: %s: %s\n' "$log_prefix" "$file" "$line" >&2
		done <<<"$problems"
		die "$file is not a valid template manifest"
	fi
}

# manifest_write SOURCE LABELS_JSON BASE_IMAGE OUT NAME
# Writes the manifest of a built template: the source manifest (SOURCE may
# be empty), overridden by the image's template.* labels (a JSON object,
# "{}" when there are none), completed with defaults and createdAt.
manifest_write() {
	local source=$1 labels=$2 base_image=$3 out=$4 name=$5 src_json='{}' created
	[[ -n $source && -f $source ]] && src_json=$(cat "$source")
	created=$(date -u +%Y-%m-%dT%H:%M:%S.000Z)
	jq -n --argjson src "$src_json" --argjson labels "$labels" \
		--arg name "$name" --arg base "$base_image" --arg created "$created" '
		def trim: gsub("^\\s+|\\s+$"; "");
		def nonempty: if . == null or . == "" then null else . end;
		($labels["template.tools"] | nonempty) as $ltools
		| $src
		| .name = $name
		| .displayName = (($labels["template.displayName"] | nonempty) // .displayName // $name)
		| .version = (.version // "1.0.0")
		| .description = (($labels["template.description"] | nonempty) // .description // "")
		| .tools = (if $ltools then [$ltools | split(",")[] | trim | select(length > 0)]
		            else (.tools // []) end)
		| .baseImage = (.baseImage // $base)
		| .resources = ((.resources // {})
		                + {memSizeMib: (.resources.memSizeMib // 512),
		                   vcpuCount: (.resources.vcpuCount // 1)})
		| .createdAt = $created
		' >"$out"
}

# manifest_check_labels LABELS_JSON NAME: a template.name label must match.
manifest_check_labels() {
	local labels=$1 name=$2 label_name
	label_name=$(jq -r '.["template.name"] // empty' <<<"$labels")
	if [[ -n $label_name && $label_name != "$name" ]]; then
		die "the Dockerfile's LABEL template.name is \"$label_name\" but the template directory is \"$name\""
	fi
}
