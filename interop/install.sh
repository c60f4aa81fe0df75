#!/usr/bin/env bash
# Real Apache RocketMQ (Java, from Maven Central) for the interop tests, plus our Java driver.
#
# For each set (interop/sets/<set>/pom.xml) Maven copies the jars into <cache>/<set>/lib, and
# javac compiles interop/driver/*.java against them into <cache>/<set>/driver.  The cache lives
# outside the repository so every clone and worktree shares it; a set whose pom and sources are
# unchanged is not touched again (a second run takes well under a second).
#
#   ROCKETMQ_INTEROP_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/rocketmq)
#   ROCKETMQ_INTEROP_SETS   which sets (default: every folder under interop/sets)
#
# Needs java, javac and mvn on PATH; when one is missing it installs Debian's
# openjdk-17-jdk-headless and maven with apt-get (as root; ROCKETMQ_INTEROP_APT=0 refuses instead,
# which is what the tests do: they skip, or fail under CI, rather than install packages).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ROCKETMQ_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/rocketmq}"
sets="${ROCKETMQ_INTEROP_SETS:-$(cd "$here/sets" && ls)}"

say() { printf 'interop/install.sh: %s\n' "$*" >&2; }

missing=()
for tool in java javac mvn ip; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
    if [[ "${ROCKETMQ_INTEROP_APT:-1}" == 1 && $EUID == 0 ]] && command -v apt-get >/dev/null; then
        say "apt-get install openjdk-17-jdk-headless maven iproute2 (missing: ${missing[*]})"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            openjdk-17-jdk-headless maven iproute2 >/dev/null
    else
        say "missing ${missing[*]}: install a JDK (17+) and Maven (Debian: openjdk-17-jdk-headless maven)"
        exit 3
    fi
fi

digest() { sha256sum "$@" | sha256sum | cut -c1-16; }

mkdir -p "$cache"
for set in $sets; do
    pom="$here/sets/$set/pom.xml"
    [[ -f "$pom" ]] || { say "no such set: $set ($pom)"; exit 2; }
    dir="$cache/$set"
    lib="$dir/lib"
    want="$(digest "$pom")"
    if [[ -f "$dir/lib.stamp" && "$(cat "$dir/lib.stamp")" == "$want" ]]; then
        say "$set: jars cached in $lib ($(ls "$lib" | wc -l) jars)"
    else
        say "$set: resolving $(sed -n 's/.*<dependency>.*<artifactId>\([^<]*\)<.*/\1/p' "$pom" | tr '\n' ' ')with Maven into $lib"
        start=$SECONDS
        rm -rf "$lib.tmp"
        # (Maven 3.8 prints colour resets even with -B -q: strip them and empty lines)
        mvn -B -q -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$cache/m2" \
            dependency:copy-dependencies -DoutputDirectory="$lib.tmp" -DincludeScope=runtime 2>&1 \
            | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' >&2
        rm -rf "$lib"
        mv "$lib.tmp" "$lib"
        echo "$want" >"$dir/lib.stamp"
        say "$set: $(ls "$lib" | wc -l) jars in $((SECONDS - start)) s"
    fi

    classes="$dir/driver"
    want="$(digest "$pom" "$here"/driver/*.java)"
    if [[ -f "$dir/driver.stamp" && "$(cat "$dir/driver.stamp")" == "$want" ]]; then
        say "$set: driver compiled in $classes"
    else
        say "$set: compiling interop/driver against the $set client into $classes"
        rm -rf "$classes.tmp"
        mkdir -p "$classes.tmp"
        javac -nowarn -encoding UTF-8 -cp "$lib/*" -d "$classes.tmp" "$here"/driver/*.java 2>&1 \
            | grep -v "^Note: " >&2 || true
        [[ -f "$classes.tmp/RocketMQDriver.class" ]] || { say "$set: javac failed"; exit 1; }
        rm -rf "$classes"
        mv "$classes.tmp" "$classes"
        echo "$want" >"$dir/driver.stamp"
    fi
done
say "ready: $cache"
