"""Reading a Snakemake HTML report the way a reader does, in headless Chromium: open every results
category and subcategory from the menu, press each figure's eye button and wait for its image to
load, open each result's information panel for its caption, and take each table's download link."""

from __future__ import annotations

import asyncio
import base64
import urllib.parse
from pathlib import Path

from headless_chromium import Page
from pydantic import BaseModel

# in-page helpers: find a link by its text, wait for a condition, go back to the menu
HELPERS = """
window.__t = {
  sleep: ms => new Promise(r => setTimeout(r, ms)),
  until: async (f, ms = 15000) => {
    const t0 = Date.now();
    while (!f()) { if (Date.now() - t0 > ms) throw new Error('timed out: ' + f); await __t.sleep(25); }
  },
  link: text => [...document.querySelectorAll('a')].find(a => a.textContent.trim() === text),
  home: () => document.querySelector('nav ol li a').click(),
  rows: () => [...document.querySelectorAll('tr')].filter(r => r.querySelector('a[iconname=eye]')),
};
true
"""

MENU = """(async () => {
  __t.home();
  await __t.until(() => __t.link('Workflow'));
  const items = [...document.querySelectorAll('a')].map(a => a.textContent.trim());
  return items.slice(items.indexOf('About') + 1);
})()"""

SUBCATEGORIES = """(async category => {
  __t.home();
  await __t.until(() => __t.link(category));
  __t.link(category).click();
  await __t.until(() => __t.rows().length || !__t.link('Workflow'));
  await __t.sleep(50);
  if (__t.rows().length) return [null];  // a single subcategory opens at once
  const items = [...document.querySelectorAll('a')].map(a => a.textContent.trim()).filter(t => t);
  return items.slice(items.indexOf(category) + 1);
})"""

OPEN = """(async (category, sub) => {
  __t.home();
  await __t.until(() => __t.link(category));
  __t.link(category).click();
  if (sub !== null) { await __t.until(() => __t.link(sub)); __t.link(sub).click(); }
  await __t.until(() => __t.rows().length);
  return __t.rows().map(r => r.querySelector('td').textContent.trim());
})"""

SHOW = """(async path => {
  const row = __t.rows().find(r => r.querySelector('td').textContent.trim() === path);
  const eye = row.querySelector('a[iconname=eye]');
  if (eye.getAttribute('download') !== null || (eye.getAttribute('href') || '#') !== '#')
    return {kind: 'download', href: eye.getAttribute('href')};
  eye.click();
  const img = () => [...document.querySelectorAll('img')].find(i => i.src === results[path].data_uri);
  await __t.until(() => img() && img().complete && img().naturalWidth > 0);
  const pane = img().closest('.overflow-auto');  // scrolled to its start, the figure's top left corner shows
  pane.scrollTop = 0;
  pane.scrollLeft = 0;
  const [i, p] = [img().getBoundingClientRect(), pane.getBoundingClientRect()];
  return {kind: 'image', width: img().naturalWidth, height: img().naturalHeight,
          reachable: i.top >= p.top - 1 && i.left >= p.left - 1};
})"""

CAPTION = """(async path => {
  const row = __t.rows().find(r => r.querySelector('td').textContent.trim() === path);
  row.querySelector('a[iconname=information-circle]').click();
  const heading = () => [...document.querySelectorAll('li')].find(li => li.textContent.trim() === 'Description');
  await __t.until(() => heading() || document.body.textContent.includes('Snakemake rule'));
  return heading() ? heading().nextElementSibling.textContent.trim() : '';
})"""


class ShownImage(BaseModel):
    path: str
    category: str
    width: int  # of the decoded image
    height: int
    reachable: bool  # its top left corner can be scrolled into view


class ReportView(BaseModel):
    categories: list[str]
    images: list[ShownImage]  # every figure whose eye button showed a decoded image
    tables: dict[str, str]  # path -> the content of its download link
    captions: dict[str, str]  # path -> the description in its information panel ('' if none)


def _decode(href: str) -> str:
    head, data = href.split(",", 1)
    return base64.b64decode(data).decode() if head.endswith(";base64") else urllib.parse.unquote(data)


async def _read(
    html: Path, profile: Path, screenshot: Path, screenshot_of: str, viewport: tuple[int, int]
) -> ReportView:
    async with Page(profile, *viewport) as page:
        await page.open(html.resolve().as_uri())
        await page.wait_for("document.querySelector('nav ol li a')")
        await page.evaluate(HELPERS)
        categories = await page.evaluate(MENU)
        images, tables, captions = [], {}, {}
        for category in categories:
            for sub in await page.evaluate(f"{SUBCATEGORIES}({category!r})"):
                paths = await page.evaluate(f"{OPEN}({category!r}, {'null' if sub is None else repr(sub)})")
                for path in paths:
                    shown = await page.evaluate(f"{SHOW}({path!r})")
                    if shown["kind"] == "image":
                        images.append(
                            ShownImage(
                                path=path,
                                category=category,
                                width=shown["width"],
                                height=shown["height"],
                                reachable=shown["reachable"],
                            )
                        )
                        if path == screenshot_of:
                            await page.screenshot(screenshot)
                    else:
                        tables[path] = _decode(shown["href"])
                for path in paths:
                    await page.evaluate(f"{OPEN}({category!r}, {'null' if sub is None else repr(sub)})")
                    captions[path] = await page.evaluate(f"{CAPTION}({path!r})")
        return ReportView(categories=categories, images=images, tables=tables, captions=captions)


def read(
    html: Path, profile: Path, screenshot: Path, screenshot_of: str, viewport: tuple[int, int] = (1400, 800)
) -> ReportView:
    """Everything a reader of ``html`` can open in a window of ``viewport`` pixels (a laptop's by
    default); a screenshot of the figure ``screenshot_of`` shown."""
    return asyncio.run(_read(html, profile, screenshot, screenshot_of, viewport))
