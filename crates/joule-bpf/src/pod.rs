//! Byte-level conversion between map values and the intf.h structs; the only unsafe reads.

use std::mem::size_of;

/// Marks the bindgen structs of intf.h: plain integers and integer arrays, explicit padding,
/// so every byte pattern is a valid value.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers with no implicit padding.
pub(crate) unsafe trait Pod: Copy {}

/// Implements [`Pod`] for types that satisfy its contract.
macro_rules! pod {
    ($($t:ty),*) => {
        // SAFETY: each is a bindgen struct of intf.h (integers and integer arrays with explicit
        // `_pad` fields, which intf.h requires) or a plain integer.
        $(unsafe impl Pod for $t {})*
    };
}

pod!(
    crate::intf::joule_runq_hist,
    crate::intf::joule_thermal_config,
    crate::intf::joule_zone_state,
    crate::intf::joule_stage,
    crate::intf::joule_feed_ctx,
    crate::intf::joule_task_wait,
    crate::intf::joule_scx_stats,
    crate::intf::joule_scx_exit,
    crate::intf::joule_flow_key,
    crate::intf::joule_flow_stats,
    crate::intf::joule_cgroup_net_key,
    crate::intf::joule_cgroup_net,
    crate::intf::joule_softirq_time,
    crate::intf::joule_netlimit_rule,
    crate::intf::joule_proc_track,
    u32,
    u64
);

/// A NUL-terminated C string of a fixed-size array in a map value (a task's comm, an exit
/// reason): the bytes up to the first NUL, lossily as UTF-8.
pub(crate) fn c_string(raw: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Reads a `T` from a map value; `None` when the size does not match (a stale pinned map of an
/// older layout, for example).
pub(crate) fn from_bytes<T: Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() != size_of::<T>() {
        return None;
    }
    // SAFETY: the length matches and `T: Pod` accepts any bit pattern; read_unaligned copes
    // with the Vec<u8> alignment.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

pub(crate) fn as_bytes<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: `T: Pod` has no padding, so all its bytes are initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}
