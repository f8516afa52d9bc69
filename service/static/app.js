"use strict";
// The page talks to the same JSON/multipart API as any client.

const $ = (id) => document.getElementById(id);

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function setStatus(element, text, isError) {
  element.textContent = text;
  element.classList.toggle("error", Boolean(isError));
}

async function errorText(response) {
  try {
    const body = await response.json();
    return `${response.status} ${body.error.code}: ${body.error.message}`;
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

$("alpha").addEventListener("input", () => {
  $("alpha-value").textContent = Number($("alpha").value).toFixed(2);
});

$("stylize-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const status = $("stylize-status");
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
  form.append("size", $("size").value);
  form.append("format", "png");
  $("stylize-button").disabled = true;
  setStatus(status, "Working…");
  try {
    const response = await fetch("/v1/stylize", { method: "POST", body: form, headers: authHeaders() });
    if (!response.ok) {
      setStatus(status, await errorText(response), true);
      return;
    }
    const image = $("stylize-result");
    image.src = URL.createObjectURL(await response.blob());
    image.hidden = false;
    setStatus(status, "Done.");
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
  } finally {
    $("stylize-button").disabled = false;
  }
});

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
    const response = await fetch("/v1/generate", {
      method: "POST",
      body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", ...authHeaders() },
    });
    if (!response.ok) {
      setStatus(status, await errorText(response), true);
      return;
    }
    const result = await response.json();
    const results = $("generate-results");
    results.replaceChildren(
      ...result.images.map((b64, i) => {
        const image = document.createElement("img");
        image.src = `data:image/png;base64,${b64}`;
        image.alt = `seed ${result.seeds[i]}`;
        image.title = `seed ${result.seeds[i]}`;
        return image;
      }),
    );
    setStatus(status, `Done (seeds ${result.seeds.join(", ")}).`);
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
  } finally {
    $("generate-button").disabled = false;
  }
});
