"use strict";
// The page talks to the same JSON/multipart API as any client. Both forms start an
// async job (Prefer: respond-async, so large sizes are never refused as too dear for a
// synchronous answer), follow its progress on the job's Server-Sent Events (read with
// fetch, so the API key header goes along) as "unit k of n" in the job's own unit, and
// can cancel it. Sizes are offered up to the server's max_side (GET /v1/limits).
// The header says which key is in use (its name only); the table lists its recent jobs.

const $ = (id) => document.getElementById(id);

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function setStatus(element, text, isError) {
  element.textContent = text;
  element.classList.toggle("error", Boolean(isError));
}

// The {code, message} of an error answer, or null when its body is not the envelope.
async function errorOf(response) {
  try {
    const { error } = await response.json();
    return error && typeof error.message === "string" ? error : null;
  } catch {
    return null;
  }
}

function describeError(response, error) {
  return error
    ? `${response.status} ${error.code}: ${error.message}`
    : `${response.status} ${response.statusText}`;
}

async function errorText(response) {
  return describeError(response, await errorOf(response));
}

// Progress in the job's own unit ("pass", "tile", "sampler step"): "tile 3 of 48".
function progressText({ unit, step, total }) {
  return `${unit} ${step} of ${total}`;
}

// Yield each {event, data} of a text/event-stream response body.
async function* serverSentEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

// Which key the page uses (GET /v1/me), and that key's recent jobs (GET /v1/jobs).
async function showKey() {
  const whoami = $("whoami");
  try {
    const response = await fetch("/v1/me", { headers: authHeaders() });
    if (!response.ok) {
      setStatus(whoami, response.status === 401 ? "No valid key: enter one." : await errorText(response), true);
      $("jobs-body").replaceChildren();
      return;
    }
    const me = await response.json();
    setStatus(whoami, `Key in use: ${me.key}`);
    await showJobs();
  } catch (error) {
    setStatus(whoami, `Network error: ${error}`, true);
  }
}

async function showJobs() {
  const response = await fetch("/v1/jobs?limit=10", { headers: authHeaders() });
  if (!response.ok) {
    setStatus($("jobs-status"), await errorText(response), true);
    return;
  }
  const { jobs } = await response.json();
  $("jobs-body").replaceChildren(
    ...jobs.map((job) => {
      const row = document.createElement("tr");
      const cells = [
        new Date(job.created_at * 1000).toLocaleTimeString(),
        job.kind,
        job.state,
        job.progress.total ? progressText(job.progress) : "",
        job.id,
      ];
      for (const [i, text] of cells.entries()) {
        const cell = document.createElement("td");
        cell.textContent = text;
        if (i === 4) cell.className = "id";
        row.append(cell);
      }
      return row;
    }),
  );
  setStatus($("jobs-status"), jobs.length ? "" : "No jobs yet.");
}

// Sizes offered beside the number field, up to the server's max_side.
const SIZE_CHOICES = [512, 1024, 2048, 4096, 8192, 16384];

// The server's limits (GET /v1/limits): the size field goes up to its max_side, and the
// hint says from which size a photo is painted at its own resolution, tile by tile.
// Without them (no valid key yet) the field has no maximum and the server still checks.
async function showLimits() {
  const response = await fetch("/v1/limits", { headers: authHeaders() });
  if (!response.ok) return;
  const { stylize, video } = await response.json();
  videoLimits = video;
  const size = $("size");
  size.max = stylize.max_side;
  const choices = SIZE_CHOICES.filter((choice) => choice < stylize.max_side);
  $("size-choices").replaceChildren(
    ...[...choices, stylize.max_side].map((choice) => new Option(`${choice} px`, choice)),
  );
  const megabytes = Math.floor(stylize.max_upload_bytes / (1024 * 1024));
  $("size-hint").textContent =
    `Up to ${stylize.max_side} px on this server; uploads up to ${megabytes} MiB in all. ` +
    `Above ${stylize.print_size_above} px the photo is painted at its own resolution, ` +
    "tile by tile (progress counts tiles).";
}

// A video keeps its own size unless asked for less: choosing one empties the size field.
let videoLimits = null;

function isVideo(file) {
  return file !== undefined && file.type.startsWith("video/");
}

$("content").addEventListener("change", () => {
  const size = $("size");
  if (isVideo($("content").files[0])) {
    size.value = "";
    size.placeholder = "the video's own size";
    if (videoLimits) {
      $("content-hint").textContent =
        `A video comes back in its own format, frame rate and sound: up to ${videoLimits.max_seconds} s ` +
        `and ${videoLimits.max_side} px here (a size scales it down). Progress counts frames.`;
    }
  } else if (size.value === "") {
    size.value = "512";
  }
});

function onKeyChange() {
  showKey();
  showLimits();
}

$("api-key").addEventListener("change", onKeyChange);
$("jobs-refresh").addEventListener("click", showJobs);
onKeyChange();

// Start a job with `request` (a fetch init), show its progress in the `prefix`-job
// block, and return the finished job (with its result), or null after an error.
// `onRefused(status, error)`, if given, also gets a refusal of the request itself.
async function runJob(url, request, prefix, onRefused) {
  const status = $(`${prefix}-status`);
  const bar = $(`${prefix}-progress`);
  const cancel = $(`${prefix}-cancel`);
  request.headers = { ...request.headers, ...authHeaders(), Prefer: "respond-async" };
  const started = await fetch(url, request);
  if (started.status !== 202) {
    const error = await errorOf(started);
    setStatus(status, describeError(started, error), true);
    if (onRefused) onRefused(started.status, error);
    return null;
  }
  const job = await started.json();
  const jobUrl = `/v1/jobs/${job.id}`;
  bar.value = 0;
  $(`${prefix}-job`).hidden = false;
  cancel.disabled = false;
  cancel.onclick = async () => {
    cancel.disabled = true;
    await fetch(jobUrl, { method: "DELETE", headers: authHeaders() });
  };
  showJobs();
  try {
    // A replica that stops sends "reconnect": follow the job again (another replica).
    for (let following = true; following; ) {
      following = false;
      const events = await fetch(`${jobUrl}/events`, { headers: authHeaders() });
      if (!events.ok) {
        setStatus(status, await errorText(events), true);
        return null;
      }
      for await (const { event, data } of serverSentEvents(events)) {
        if (event === "reconnect") {
          following = true;
          break;
        }
        const { step, total } = data.progress;
        if (total > 0) {
          bar.max = total;
          bar.value = step;
          setStatus(status, `${data.state}: ${progressText(data.progress)}`);
        } else {
          setStatus(status, `${data.state}…`);
        }
      }
    }
    const final = await fetch(jobUrl, { headers: authHeaders() });
    if (!final.ok) {
      setStatus(status, await errorText(final), true);
      return null;
    }
    const done = await final.json();
    showJobs();
    if (done.state === "cancelled") setStatus(status, "Cancelled.");
    else if (done.state === "failed") setStatus(status, `${done.error.code}: ${done.error.message}`, true);
    return done;
  } finally {
    cancel.disabled = true;
  }
}

$("alpha").addEventListener("input", () => {
  $("alpha-value").textContent = Number($("alpha").value).toFixed(2);
});
$("style-scale").addEventListener("input", () => {
  $("style-scale-value").textContent = Number($("style-scale").value).toFixed(2);
});

$("format").addEventListener("change", () => {
  $("quality").disabled = $("format").value === "png"; // PNG is lossless
});

// A 422 that names the size (over max_side, over the cost budget, over the format's
// largest side) is shown next to the size field as well.
function showSizeRefusal(status, error) {
  if (status === 422 && error && /\bsize\b/.test(error.message)) {
    $("size-error").textContent = error.message;
  }
}

// The result's file name suffix, from the server's Content-Disposition ("ID-0.mp4").
function suffixOf(response) {
  const match = /filename="[^"]*\.([a-z0-9]+)"/.exec(response.headers.get("content-disposition") ?? "");
  return match ? match[1] : "bin";
}

$("stylize-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const status = $("stylize-status");
  $("size-error").textContent = "";
  const styles = $("styles").files;
  if (styles.length < 1 || styles.length > 4) {
    setStatus(status, "Choose one to four paintings.", true);
    return;
  }
  const form = new FormData();
  form.append("content", $("content").files[0]);
  for (const file of styles) form.append("style", file);
  form.append("alpha", $("alpha").value);
  form.append("preserve_color", $("preserve-color").checked ? "true" : "false");
  form.append("preset", $("preset").value);
  form.append("style_scale", $("style-scale").value);
  if ($("size").value !== "") form.append("size", $("size").value);
  form.append("format", $("format").value);
  if (!$("quality").disabled && $("quality").value !== "") form.append("quality", $("quality").value);
  $("stylize-button").disabled = true;
  setStatus(status, "Working…");
  try {
    const request = { method: "POST", body: form };
    const job = await runJob("/v1/stylize", request, "stylize", showSizeRefusal);
    if (job === null || job.state !== "succeeded") return;
    // The image file itself (a print is tens of MB: no base64 copy in the page)
    const file = await fetch(job.result_url, { headers: authHeaders() });
    if (!file.ok) {
      setStatus(status, await errorText(file), true);
      return;
    }
    const blob = await file.blob();
    const image = $("stylize-result");
    const player = $("stylize-video");
    for (const element of [image, player]) {
      if (element.src.startsWith("blob:")) URL.revokeObjectURL(element.src);
      element.removeAttribute("src");
      element.hidden = true;
    }
    const shown = blob.type.startsWith("video/") ? player : image;
    shown.src = URL.createObjectURL(blob);
    shown.hidden = false;
    const download = $("stylize-download");
    download.href = shown.src;
    download.download = `stylized.${suffixOf(file)}`;
    download.hidden = false;
    setStatus(status, "Done.");
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
  } finally {
    $("stylize-button").disabled = false;
  }
});

// Says how the prompt was read: the plan in words, and the words it did not use.
function showUnderstanding(result) {
  const element = $("generate-understood");
  const drawn = result.understood === null
    ? "Not understood; drawn as typed."
    : `Drawn as: ${result.understood}.`;
  const ignored = result.ignored.length ? ` Ignored: ${result.ignored.join(", ")}.` : "";
  element.textContent = drawn + ignored;
  element.classList.toggle("partial", result.understood === null || result.ignored.length > 0);
  element.hidden = false;
}

$("generate-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const status = $("generate-status");
  const body = {
    prompt: $("prompt").value,
    num_images: Number($("num-images").value),
    plan_layout: $("plan-layout").checked,
  };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  $("generate-button").disabled = true;
  setStatus(status, "Working…");
  try {
    const job = await runJob(
      "/v1/generate",
      { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } },
      "generate",
    );
    if (job === null || job.state !== "succeeded") return;
    const result = job.result;
    $("generate-results").replaceChildren(
      ...result.images.map((b64, i) => {
        const image = document.createElement("img");
        image.src = `data:image/png;base64,${b64}`;
        image.alt = `seed ${result.seeds[i]}`;
        image.title = `seed ${result.seeds[i]}`;
        return image;
      }),
    );
    showUnderstanding(result);
    setStatus(status, `Done (seeds ${result.seeds.join(", ")}).`);
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
  } finally {
    $("generate-button").disabled = false;
  }
});
