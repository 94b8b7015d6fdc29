# Sourced by the install scripts: the user's cache folder, by the rule the runtime uses
# (crates/kittens-runtime/src/trust/mod.rs): $KITTENS_CACHE (absolute), else $XDG_CACHE_HOME/kittens
# (when absolute), else $HOME/.cache/kittens. `kittens_toolchains` creates <cache>/toolchains with mode
# 0700 and refuses a folder on the way that another user owns or that its group or every user may
# write (a root-owned sticky folder such as /tmp is accepted above the cache), as the runtime would
# refuse what is installed there.

kittens_user_cache() {
    if [ -n "${KITTENS_CACHE:-}" ]; then
        case "$KITTENS_CACHE" in
            /*) printf '%s\n' "$KITTENS_CACHE" ;;
            *) echo "KITTENS_CACHE=$KITTENS_CACHE is a relative path; set an absolute one" >&2; return 1 ;;
        esac
    elif [ -n "${XDG_CACHE_HOME:-}" ] && [ "${XDG_CACHE_HOME#/}" != "$XDG_CACHE_HOME" ]; then
        printf '%s\n' "$XDG_CACHE_HOME/kittens"
    elif [ -n "${HOME:-}" ] && [ "${HOME#/}" != "$HOME" ]; then
        printf '%s\n' "$HOME/.cache/kittens"
    else
        echo "no cache folder: none of KITTENS_CACHE, XDG_CACHE_HOME, HOME is an absolute path" >&2
        return 1
    fi
}

# Checks one existing folder: `own` (the cache and below: this user's) or `above`.
kittens_check_dir() {
    local dir="$1" role="$2" me owner mode IFS=" "
    me=$(id -u)
    read -r owner mode < <(stat -L -c '%u %a' "$dir")
    mode=$((8#$mode))
    if [ "$role" = own ] && [ "$owner" != "$me" ]; then
        echo "$dir belongs to uid $owner, not to this user (uid $me); refusing it" >&2; return 1
    fi
    if [ "$owner" != "$me" ] && [ "$owner" != 0 ]; then
        echo "$dir belongs to uid $owner, neither this user nor root; refusing it" >&2; return 1
    fi
    if [ "$role" = above ] && [ "$owner" = 0 ] && [ $((mode & 8#1000)) -ne 0 ]; then
        return 0
    fi
    if [ $((mode & 8#022)) -ne 0 ]; then
        printf '%s is writable by its group or every user (mode %o); refusing it\n' "$dir" "$mode" >&2
        return 1
    fi
}

# Prints <user cache>/toolchains after creating it (0700) and checking every folder down to it.
kittens_toolchains() {
    local cache dir p
    cache=$(kittens_user_cache) || return 1
    dir="$cache/toolchains"
    (umask 077 && mkdir -p "$dir") || return 1
    kittens_check_dir / above || return 1
    p=""
    local IFS=/
    for part in ${cache#/}; do
        p="$p/$part"
        kittens_check_dir "$p" above || return 1
    done
    kittens_check_dir "$cache" own || return 1
    kittens_check_dir "$dir" own || return 1
    printf '%s\n' "$dir"
}
