//! The checks on maps built entry by entry, against desired states built by the real
//! builder from API objects.
