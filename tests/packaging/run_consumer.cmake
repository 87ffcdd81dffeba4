# run_consumer.cmake — installs the built ascan into a temporary prefix, builds a consumer
# project with find_package(ascan) against it, and runs it. Invoked by ctest with cmake -P.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: `${ARGN}` failed (${rc}):\n${err}")
  endif()
endfunction()

step(${CMAKE_COMMAND} --install "${ASCAN_BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
set(api_smoke "")
if(EXISTS "${SHARED_DIR}/api_smoke.cpp")
  set(api_smoke "-DASCAN_API_SMOKE=${SHARED_DIR}/api_smoke.cpp")
endif()
step(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build"
     "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
     "-DCONSUMER_SANITIZE=${SANITIZE}" ${api_smoke})
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build" -j2)
step("${WORK_DIR}/build/consumer")
if(EXISTS "${WORK_DIR}/build/api_smoke")
  step("${WORK_DIR}/build/api_smoke")
endif()
if(EXISTS "${WORK_DIR}/build/torch_consumer")
  step("${WORK_DIR}/build/torch_consumer")
endif()
