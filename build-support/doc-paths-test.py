#!/usr/bin/env python3
"""Every repository path that README.md and docs/*.md name exists.

A path is a word that starts with one of the repository's top-level folders (src/, include/,
bench/, examples/, docs/, build-support/, thirdparty/, cmake/, .ci/) or is a relative Markdown
link; `name.{h,cc}` stands for both files and `prefix*` for some file that starts so. A path with
`...` or inside another (a user's project, build/...) is not checked. Exit 0 when all exist;
otherwise print each missing path with the file and line that names it, and exit 1.

Usage: build-support/doc-paths-test.py [REPO_ROOT]
"""
import os
import re
import sys

TOP = ('src/', 'include/', 'bench/', 'examples/', 'docs/', 'build-support/', 'thirdparty/',
       'cmake/', '.ci/')
WORD = re.compile(r'(?<![\w./+-])((?:\.ci|[a-z][\w-]*)/[\w./+-]*[\w/])')
LINK = re.compile(r'\]\(([^)#\s]+)(?:#[^)]*)?\)')


def missing_in(root, doc):
    base = os.path.dirname(doc)
    found = []
    with open(os.path.join(root, doc), encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            for target in LINK.findall(line):
                if re.match(r'^[a-z]+:', target):
                    continue  # http:, mailto:
                path = os.path.normpath(os.path.join(base, target))
                if not os.path.exists(os.path.join(root, path)):
                    found.append((number, target))
            for match in WORD.finditer(line):
                word, after = match.group(1), line[match.end():match.end() + 1]
                if line[match.end():match.end() + 2] == '.{':
                    word, after = word + '.', '{'
                    match_end = match.end() + 1
                else:
                    match_end = match.end()
                if not word.startswith(TOP) or '...' in word:
                    continue
                if after == '{':  # tls_context.{h,cc}
                    names = line[match_end + 1:].split('}')[0].split(',')
                    paths = [word + name for name in names]
                elif after == '*':  # raw_tcp_*: some file starts so
                    folder, prefix = os.path.split(word)
                    listing = os.listdir(os.path.join(root, folder)) if os.path.isdir(
                        os.path.join(root, folder)) else []
                    paths = [word] if not any(n.startswith(prefix) for n in listing) else []
                else:
                    paths = [word.rstrip('/')]
                for path in paths:
                    if not os.path.exists(os.path.join(root, path)):
                        found.append((number, path))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    docs = ['README.md'] + sorted(
        os.path.join('docs', name) for name in os.listdir(os.path.join(root, 'docs'))
        if name.endswith('.md'))
    bad = 0
    for doc in docs:
        for number, word in missing_in(root, doc):
            print('%s:%d: no such path in the repository: %s' % (doc, number, word))
            bad += 1
    print('%d paths named in %d documents do not exist' % (bad, len(docs)) if bad else
          'every repository path named in %d documents exists' % len(docs))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
