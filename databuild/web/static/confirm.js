// A form with data-confirm (cancel a want, skip a partition) asks before it posts. The question is read
// from the attribute as text, so a ref in it is never code.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
