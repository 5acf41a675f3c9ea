"""Reading the class report's page in tests (tinygpt-class-report), and what it must say of a
catalogue answer."""
import html
import re

from . import catalogue


def section(page, title):
    """The HTML between the <h2> titled `title` and the next one."""
    return re.search(rf"<h2>{re.escape(title)}</h2>(.*?)(<h2>|</body>)", page, re.S).group(1)


def listed(page):
    """From the page's table of mistakes: {mistake: {learner ids, unescaped}} and {mistake: count}."""
    who, counts = {}, {}
    for row in re.finditer(r'<tr id="mistake-(\w+)">.*?<td class="count">(\d+)</td><td>(.*?)</td>', page, re.S):
        counts[row.group(1)] = int(row.group(2))
        who[row.group(1)] = {html.unescape(m) for m in re.findall(r"(?:^|<br>)<code>([^<]*)</code>", row.group(3))}
    return who, counts


def by_learner(who):
    """{learner: {mistakes}} from listed()'s {mistake: {learners}}."""
    out = {}
    for m, learners in who.items():
        for learner in learners:
            out.setdefault(learner, set()).add(m)
    return out


def expected_mistakes(answer):
    """The mistakes the report must list for a graded catalogue answer: a right answer (full
    marks expected), none; an answer that runs as plain Python, every mistake the lesson's
    judge names for it run here (its header's one, and what its other failed checks see). None
    for the others: a crash's header names what the learner's kernel sees (`too_slow` for an
    endless loop, where grading's re-run, timed out, says `no_result`), attacks and tampering
    name none; the re-run names what it sees."""
    if all(p > 0 for p in answer.expect.values()):
        return set()
    if answer.plain:
        return set(catalogue.mistakes_named(answer).values())
    return None
