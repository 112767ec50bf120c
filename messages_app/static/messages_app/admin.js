'use strict';
// Picking a row in an autocomplete list filter reloads the list narrowed to it; clearing the
// pick drops the parameter instead of sending it empty.
{
    const $ = django.jQuery;
    $(function() {
        $('form.autocomplete-filter select').on('change', function() {
            if (!this.value) {
                this.removeAttribute('name');
            }
            this.form.submit();
        });
    });
}
