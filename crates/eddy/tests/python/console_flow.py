"""Eddy's web console in headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium from PyPI), as a new user would use it:
log in with the API key, create a pipeline from the editor, see its error
marked, fix it, start it, insert and delete rows from the console while a
second window watches the view change live, run an ad-hoc query and download
it as CSV, look at the performance charts, the dataflow graph, the errors
and the log,
stop the pipeline,
approve a changed program after reading what it changes, and clear the
pipeline's state (asked first). A
screenshot of every page is written to SHOTS.

Usage: python console_flow.py URL API_KEY SHOTS CHROMIUM CHROMEDRIVER
"""

import csv
import os
import shutil
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

url, key, shots, chromium, chromedriver = sys.argv[1:6]
os.makedirs(shots, exist_ok=True)
scratch = tempfile.mkdtemp(prefix="eddy-console-")
downloads = os.path.join(scratch, "downloads")
os.makedirs(downloads)

options = webdriver.ChromeOptions()
options.binary_location = chromium
for arg in [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
    "--no-first-run",
    "--user-data-dir=" + os.path.join(scratch, "profile"),
]:
    options.add_argument(arg)
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service(chromedriver), options=options)
driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
wait = WebDriverWait(driver, 30)


def shot(name):
    driver.save_screenshot(os.path.join(shots, name + ".png"))


def find(css):
    return wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, css)))


def click(css):
    wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, css))).click()


def text_in(css, text):
    try:
        wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    except Exception:
        got = [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]
        shot("failed")
        raise AssertionError(f"{css!r} should show {text!r}, shows {got!r}")


def status(expected):
    text_in("#state .badge", expected)


def type_program(sql):
    """Replaces the editor's text by typing, as a user would."""
    editor = find(".cm-content")
    editor.click()
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    for line in sql.strip().split("\n"):
        editor.send_keys(line.strip())
        editor.send_keys(Keys.ENTER)


def live_rows():
    """The live table's rows, as lists of cell texts."""
    return [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in driver.find_elements(By.CSS_SELECTOR, "#live-rows tbody tr")
    ]


def wait_rows(expected):
    try:
        wait.until(lambda d: sorted(live_rows()) == sorted(expected))
    except Exception:
        shot("failed")
        raise AssertionError(f"live rows should be {expected}, are {live_rows()}")


BROKEN = """
CREATE TABLE orders (
id BIGINT NOT NULL PRIMARY KEY,
customer VARCHAR,
amount INT
) WITH ('materialized' = 'true');
CREATE MATERIALIZED VIEW totals AS
SELECT customer, SUM(amout) AS total, COUNT(*) AS n
FROM orders GROUP BY customer;
"""

try:
    # The console asks for the key; a wrong one is refused.
    driver.get(url + "/")
    find("#api-key").send_keys("not-the-key")
    shot("01-login")
    click("#login")
    text_in("form.login", "That API key was refused.")
    find("#api-key").send_keys(key)
    click("#login")
    text_in("#pipelines", "No pipelines yet")
    shot("02-pipelines-empty")

    # A new pipeline from the editor: the error is marked where it is.
    find("#new-name").send_keys("demo")
    click("#create")
    status("not saved yet")
    find(".cm-content")
    shot("03-new-pipeline")
    type_program(BROKEN)
    click("#save")
    text_in("#save-note", "amout")
    text_in("#save-note", "Pipeline created with errors")
    status("Stopped (program error)")
    assert not driver.find_elements(By.CSS_SELECTOR, "[data-action=start]")
    marked = find(".cm-lintRange-error")
    assert marked.text == "amout", marked.text
    find(".cm-lint-marker-error")
    note = driver.find_element(By.CSS_SELECTOR, "#save-note").text
    assert "7:" in note, note
    # The line itself, with a caret under the misspelt name.
    assert "^^^^^" in note and "Did you mean" in note, note
    shot("04-sql-error-marked")

    # Fixed, saved, started; the runtime configuration set in its form,
    # which writes the JSON sent (a field left empty is the default).
    type_program(BROKEN.replace("amout", "amount"))
    click("#runtime summary")
    find("#rc-max_buffered_records").send_keys("50000")
    config = find("#runtime-config").get_attribute("value")
    assert '"max_buffered_records": 50000' in config, config
    find("#rc-workers").send_keys("two")
    text_in("#runtime-note", "'two' is not a whole number")
    find("#rc-workers").clear()
    find("#rc-workers").send_keys(" ")
    shot("04b-runtime-config")
    click("#save")
    text_in("#save-note", "Saved.")
    assert not driver.find_elements(By.CSS_SELECTOR, ".cm-lintRange-error")
    status("Stopped")
    click("[data-action=start]")
    status("Running")
    shot("05-sql-running")

    # A second window watches the view live.
    main = driver.current_window_handle
    driver.switch_to.new_window("window")
    watcher = driver.current_window_handle
    driver.get(url + "/#/pipelines/demo/relations")
    # The key is kept per tab (sessionStorage), so a new window asks again.
    find("#api-key").send_keys(key)
    click("#login")
    text_in("#relation h2", "View totals")
    text_in("#live-state", "Live")
    text_in("#live-count", "(0 rows)")

    # Rows inserted from the console in the first window...
    driver.switch_to.window(main)
    click("[data-tab=relations]")
    click("[data-relation=orders]")
    rows = find("#rows")
    rows.send_keys(
        '{"id": 1, "customer": "ann", "amount": 10}\n'
        '{"id": 2, "customer": "bob", "amount": 5}\n'
        '{"id": 3, "customer": "ann", "amount": 7}'
    )
    click("#insert")
    text_in("#rows-note", "3 rows inserted and processed.")
    shot("06-table-insert")
    # ... show up in the second one without a reload.
    driver.switch_to.window(watcher)
    wait_rows([["ann", "17", "2", "1"], ["bob", "5", "1", "1"]])
    text_in("#live-log", "+")
    shot("07-view-live")

    # A delete (by key) and a rejected row.
    driver.switch_to.window(main)
    rows = find("#rows")
    rows.clear()
    rows.send_keys('{"id": 3}')
    click("#delete")
    text_in("#rows-note", "1 row deleted and processed.")
    rows.clear()
    rows.send_keys('{"id": "x", "customer": "eve"}')
    click("#insert")
    text_in("#rows-note", "rejected")
    shot("08-table-rejected")
    driver.switch_to.window(watcher)
    wait_rows([["ann", "10", "1", "1"], ["bob", "5", "1", "1"]])
    deletes = driver.find_elements(By.CSS_SELECTOR, "#live-log tr.delete")
    assert any("17" in d.text for d in deletes), [d.text for d in deletes]
    shot("09-view-after-delete")
    driver.close()
    driver.switch_to.window(main)

    # An ad-hoc query, and its CSV.
    click("[data-tab=query]")
    q = find("#query-text")
    q.clear()
    q.send_keys("SELECT customer, total FROM totals ORDER BY customer")
    click("#run-query")
    text_in("#query-note", "2 rows")
    cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#query-result td")]
    assert cells == ["ann", "10", "bob", "5"], cells
    shot("10-query")
    click("#download")
    path = os.path.join(downloads, "demo-query.csv")
    deadline = time.time() + 20
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.2)
    with open(path, newline="") as f:
        got = list(csv.reader(f))
    assert got[-2:] == [["ann", "10"], ["bob", "5"]], got

    # A bad query shows the planner's error and leaves the page usable.
    q.clear()
    q.send_keys("SELECT nope FROM totals")
    click("#run-query")
    text_in("#query-note", "nope")

    # Performance: four charts and the connectors' counters.
    click("[data-tab=performance]")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".chart .uplot")) == 4)
    text_in("#connectors", "api-ingress-orders")
    time.sleep(2.5)  # a few samples, for the screenshot
    shot("11-performance")

    # Dataflow: the circuit drawn; a node of the view, its costs and SQL.
    click("[data-tab=dataflow]")
    find("#dataflow-graph svg g.node")
    text_in("#dataflow-summary", "nodes")
    aggregates = [g for g in driver.find_elements(By.CSS_SELECTOR, "#dataflow-graph g.node[data-relation=totals]")
                  if "aggregate" in g.text]
    assert aggregates, [g.text for g in driver.find_elements(By.CSS_SELECTOR, "#dataflow-graph g.node")]
    aggregates[0].click()
    text_in("#dataflow-details", "Rows in / out")
    text_in("#dataflow-sql", "CREATE MATERIALIZED VIEW totals")
    # The rows went through it: 3 inserted, then 1 deleted.
    text_in("#dataflow-details", "4 /")
    click("[data-select-relation=totals]")
    text_in("#dataflow-details h3", "totals")
    shot("11b-dataflow")

    # Logs: the pipeline's lines, the rejected row among them.
    click("[data-tab=logs]")
    text_in("#log-lines", "pipeline started")
    text_in("#log-lines", "rows rejected")
    find("#log-lines .line.warn")
    filt = find("#log-filter")
    filt.send_keys("rejected")
    shown = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#log-lines .line") if e.is_displayed()]
    assert shown and all("rejected" in t for t in shown), shown
    shot("12-logs")

    # Errors: the rejected row's endpoint now, and the warning logged.
    click("[data-tab=errors]")
    text_in("#errors-now", "api-ingress-orders")
    text_in("#errors-now", "1 row rejected")
    text_in("#errors-history", "rows rejected")
    find("#errors-history tr.warn")
    shot("12b-errors")

    # The list shows it running; stop it from there.
    driver.get(url + "/#/")
    text_in("[data-pipeline=demo]", "Running")
    shot("13-pipelines-running")
    click("[data-pipeline=demo] [data-action=stop]")
    text_in("[data-pipeline=demo]", "Stopped")
    shot("14-pipelines-stopped")

    # A changed program: its start awaits approval, and the page says what
    # approving would do before anything is done.
    driver.get(url + "/#/pipelines/demo/sql")
    find(".cm-content")
    type_program(BROKEN.replace("amout", "amount")
                 + "CREATE VIEW big_orders AS SELECT id FROM orders WHERE amount > 6;")
    click("#save")
    text_in("#save-note", "Saved.")
    click("[data-action=start]")
    status("Awaiting approval")
    text_in("[data-change=views-added]", "Views added: big_orders")
    text_in("[data-change=kept]", "1 table, 1 view")
    assert not driver.find_elements(By.CSS_SELECTOR, "[data-change=views-removed]")
    shot("15-awaiting-approval")
    click("[data-action=approve]")
    status("Running")
    assert not driver.find_elements(By.CSS_SELECTOR, "#approval li")
    click("[data-action=stop]")
    status("Stopped")

    # Clear asks first: dismissed, nothing is cleared; accepted, it is.
    driver.get(url + "/#/")
    text_in("[data-pipeline=demo]", "InUse")
    click("[data-pipeline=demo] [data-action=clear]")
    alert = wait.until(EC.alert_is_present())
    assert "state, checkpoints and journal are deleted" in alert.text, alert.text
    alert.dismiss()
    time.sleep(2.5)  # a refresh of the list
    text_in("[data-pipeline=demo]", "InUse")
    click("[data-pipeline=demo] [data-action=clear]")
    wait.until(EC.alert_is_present()).accept()
    text_in("[data-pipeline=demo]", "Cleared")
    shot("16-pipelines-cleared")

    # Nothing went wrong in the page itself (a script error, a refused policy).
    # The API's refusals (the wrong key, the broken program, the pipeline
    # that did not exist yet, the bad query) are logged by the browser as
    # failed loads; they were expected and shown in the page.
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"
              and not (e["source"] == "network" and "/v0/" in e["message"])]
    assert not severe, severe
finally:
    driver.quit()
    shutil.rmtree(scratch, ignore_errors=True)
print("console flow passed")
