# cmake -DOUT=file.cpp -DFILES="a.html;b.js" -P embed.cmake: writes OUT, a C++ file with each
# file's text in the table host/dashboard.hpp declares (the dashboard the admin API serves, kept
# as ordinary files in the tree).
file(WRITE ${OUT} "// Made by cmake/embed.cmake from src/host/dashboard: edit those files.\n"
                  "#include \"host/dashboard.hpp\"\n\nnamespace baton::internal {\n\n"
                  "const DashboardFile kDashboardFiles[] = {\n")
foreach(f IN LISTS FILES)
  file(READ ${f} text)
  get_filename_component(name ${f} NAME)
  get_filename_component(ext ${f} EXT)
  if(ext STREQUAL ".html")
    set(type "text/html; charset=utf-8")
    set(path "/")
  elseif(ext STREQUAL ".js")
    set(type "text/javascript; charset=utf-8")
    set(path "/${name}")
  else()
    set(type "text/css; charset=utf-8")
    set(path "/${name}")
  endif()
  file(APPEND ${OUT} "    {\"${path}\", \"${type}\", R\"baton_embed(${text})baton_embed\"},\n")
endforeach()
file(APPEND ${OUT} "};\n\nconst std::size_t kDashboardFileCount = std::size(kDashboardFiles);\n\n"
                   "}  // namespace baton::internal\n")
