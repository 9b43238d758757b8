// Says why the last login was refused; the page has no inline script.
if (new URLSearchParams(location.search).has("failed")) {
  document.getElementById("failed").hidden = false;
}
