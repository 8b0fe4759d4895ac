#!/usr/bin/env python3
"""Every relative link in README.md, CHANGELOG.md and docs/*.md points at a file or
folder in the repository (a link's #anchor is not checked); none points outside it.

usage: check_links.py [REPO_DIR]
"""
import pathlib
import re
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    pages = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md"))]
    bad = 0
    for page in pages:
        if not page.exists():
            continue
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue  # a web address, a mail address, or an anchor in the page
                path = (page.parent / target.split("#")[0]).resolve()
                where = f"{page.relative_to(root)}:{n}: {target}"
                if root not in path.parents and path != root:
                    print(f"{where}: points outside the repository")
                    bad += 1
                elif not path.exists():
                    print(f"{where}: no such file")
                    bad += 1
    if bad:
        print(f"{bad} broken links")
        return 1
    print(f"links: every relative link of {len(pages)} pages resolves inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
